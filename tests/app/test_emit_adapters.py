"""Emitted configs of LoRA / QLoRA, pure-bf16, paged-optimizer and offload plans: each file is loaded by the
tool that reads it (peft, transformers, DeepSpeed, accelerate) and follows the plan."""

from __future__ import annotations

import inspect
import json
import subprocess
import warnings

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)
import yaml

from advisor.app.api import estimate, recommend
from advisor.app.emit import (
    LORA_CONFIG_FILE,
    MODEL_KWARGS_FILE,
    NVME_PATH,
    accelerate_config,
    deepspeed_config,
    render,
    training_args,
)
from advisor.app.emit_model import model_kwargs
from advisor.engine.recommendation import Recommendation
from probes.adapters import adapter_parameters
from advisor.core.errors import UsageError
from probes.lora_config import ATTENTION_MODULES, lora_config_kwargs
from probes.model import profile_model
from advisor.core.vocabulary import LoraTargets, Method, Offload, Optimizer, Parallelism, Precision, WeightsDtype

transformers = pytest.importorskip("transformers")

LLAMA = "meta-llama/Llama-2-7b-hf"
CASES = {  # name -> recommend() arguments
    "lora (auto) on rtx-4090": dict(model=LLAMA, gpu="rtx-4090"),
    "qlora on rtx-4090": dict(model=LLAMA, gpu="rtx-4090", method=Method.QLORA.value),
    "lora attention r=8 on a100-80gb": dict(
        model=LLAMA, gpu="a100-80gb", method=Method.LORA.value, lora_rank=8, lora_targets=LoraTargets.ATTENTION.value
    ),
    "full, ZeRO-2 CPU offload on rtx-4090": dict(
        model=LLAMA, gpu="rtx-4090", method=Method.FULL.value, host_memory_bytes=256 * 2**30
    ),
    "full, ZeRO-Infinity NVMe on rtx-4090": dict(
        model=LLAMA, gpu="rtx-4090", method=Method.FULL.value, host_memory_bytes=64 * 2**30
    ),
    "gpt2 lora attention on t4 (fp16)": dict(
        model="gpt2", gpu="t4", method=Method.LORA.value, lora_targets=LoraTargets.ATTENTION.value
    ),
}


def _rec(name: str) -> Recommendation:
    kw = dict(CASES[name])
    return recommend(kw.pop("model"), **kw)


def _with(rec: Recommendation, **plan) -> Recommendation:
    """The recommendation with some plan settings changed (what the emitter reads)."""
    return rec.model_copy(update={"plan": rec.plan.model_copy(update=plan)})


def test_the_cases_plan_what_their_names_say() -> None:
    assert Method.of(_rec("lora (auto) on rtx-4090").plan.method).spec.adapters
    assert _rec("qlora on rtx-4090").plan.method == Method.QLORA
    cpu = _rec("full, ZeRO-2 CPU offload on rtx-4090").plan
    assert (cpu.parallelism, cpu.offload) == (Parallelism.ZERO_2, Offload.OPTIMIZER)
    assert _rec("full, ZeRO-Infinity NVMe on rtx-4090").plan.offload == Offload.NVME


@pytest.mark.parametrize("name", [n for n in CASES if "full" not in n])
def test_lora_config_builds_peft_loraconfig_with_the_plans_adapters(name, tmp_path) -> None:
    peft = pytest.importorskip("peft")
    rec = _rec(name)
    files = render(rec, ["hf"])
    kwargs = json.loads(files[LORA_CONFIG_FILE])
    fields = set(inspect.signature(peft.LoraConfig).parameters)
    assert set(kwargs) <= fields, set(kwargs) - fields  # a misspelt key would be a TypeError, but say which
    config = peft.LoraConfig(**kwargs)
    plan = rec.plan
    assert (config.r, config.lora_alpha, config.lora_dropout, config.bias) == (
        plan.lora_rank,
        2 * plan.lora_rank,
        0.0,
        "none",
    )
    assert config.task_type == peft.TaskType.CAUSAL_LM
    if plan.lora_targets == LoraTargets.ALL_LINEAR:
        assert config.target_modules == "all-linear"
    else:
        assert set(config.target_modules) == set(ATTENTION_MODULES[rec.model.model_type])
    config.save_pretrained(str(tmp_path))  # PEFT's own file round-trips
    assert peft.LoraConfig.from_pretrained(str(tmp_path)).r == plan.lora_rank


def test_full_fine_tuning_writes_no_lora_config() -> None:
    files = render(_rec("full, ZeRO-2 CPU offload on rtx-4090"), ["hf"])
    assert LORA_CONFIG_FILE not in files and MODEL_KWARGS_FILE in files


def _tiny(model_type: str) -> dict:
    """A two-layer config of ``model_type`` (small widths: the adapters' counts and names, not the sizes, matter)."""
    if model_type == "gpt2":
        return dict(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=100, architectures=["GPT2LMHeadModel"])
    if model_type == "distilbert":
        return dict(
            dim=64, hidden_dim=128, n_layers=2, n_heads=4, vocab_size=100, architectures=["DistilBertForMaskedLM"]
        )
    if model_type == "t5":
        return dict(
            d_model=64,
            d_ff=128,
            d_kv=16,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            vocab_size=100,
            architectures=["T5ForConditionalGeneration"],
        )
    if model_type == "opt":
        return dict(
            hidden_size=64,
            ffn_dim=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            vocab_size=100,
            word_embed_proj_dim=64,
            max_position_embeddings=128,
            architectures=["OPTForCausalLM"],
        )
    arch = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM"}.get(model_type, "ForCausalLM")
    cfg = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=130,
        head_dim=16,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_local_experts=2,
        num_experts=2,
        num_experts_per_tok=1,
        pad_token_id=0,
    )
    if arch == "ForCausalLM":
        arch = transformers.AutoConfig.for_model(model_type).__class__.__name__.replace("Config", "ForCausalLM")
    return {**cfg, "architectures": [arch]}


def _peft_model(model_type: str, targets: str, tmp_path, task: str | None = None):
    """(the PEFT-wrapped tiny model, its profile) with the emitter's LoraConfig at rank 4 (``task``: another head)."""
    peft = pytest.importorskip("peft")
    cfg = _tiny(model_type)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, **cfg}))
    profile = profile_model(str(path), task=task)
    from advisor.measure.trainable import build_model, hf_config
    from rules import Plan

    plan = Plan(
        device="cpu",
        precision="fp32",
        tf32=False,
        optimizer="adamw",
        gradient_checkpointing=False,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        parallelism="none",
        num_gpus=0,
    )
    net = build_model(profile, hf_config(profile, plan, json.loads(path.read_text())))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return peft.get_peft_model(net, peft.LoraConfig(**lora_config_kwargs(profile, 4, targets))), profile


@pytest.mark.parametrize("model_type", sorted(ATTENTION_MODULES))
def test_attention_names_target_the_projections_advisor_counts(model_type, tmp_path) -> None:
    """Every name of the table matches a module of the model, and the adapters PEFT builds are the ones
    ``probes.adapters`` prices (GPT-2's fused c_attn: one r·(h + 3h) adapter counted as three r·2h)."""
    wrapped, profile = _peft_model(model_type, LoraTargets.ATTENTION.value, tmp_path)
    adapted = {name.rsplit(".lora_A", 1)[0] for name, _ in wrapped.named_parameters() if ".lora_A." in name}
    for entry in ATTENTION_MODULES[model_type]:
        assert any(name.endswith("." + entry) for name in adapted), f"{entry} targets nothing in {model_type}"
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    heads = sum(p.numel() for n, p in wrapped.named_parameters() if p.requires_grad and "lora_" not in n)
    counted = adapter_parameters(profile, 4, LoraTargets.ATTENTION.value)
    # a fused q, k and v (GPT-2's c_attn, Phi-3's qkv_proj): one r·(h + q + 2kv) adapter, counted as three
    fused = 4 * 2 * profile.hidden_size * profile.num_layers if len(ATTENTION_MODULES[model_type]) == 2 else 0
    assert trainable - heads == counted - fused


@pytest.mark.parametrize("model_type", sorted(set(ATTENTION_MODULES) - {"t5"}))
def test_all_linear_adapters_build_over_a_classification_head(model_type, tmp_path) -> None:
    """PEFT builds the emitter's all-linear adapters over each sequence-classification head, the head trained whole:
    DistilBERT's pre_classifier, which PEFT's modules_to_save "classifier" matches by suffix, is left out of the
    adapters (PEFT raised "modules_to_save cannot be applied to modules of type lora.Linear" before)."""
    wrapped, _ = _peft_model(model_type, LoraTargets.ALL_LINEAR.value, tmp_path, task="sequence-classification")
    names = {name for name, p in wrapped.named_parameters() if p.requires_grad}
    assert any(".lora_A." in name for name in names)
    assert any("lora_" not in name and ("classifier" in name or "score" in name) for name in names)


@pytest.mark.parametrize("model_type", sorted(t for t, names in ATTENTION_MODULES.items() if len(names) == 4))
def test_query_value_adapters_are_peft_defaults_and_the_ones_advisor_counts(model_type, tmp_path) -> None:
    """``--lora-targets q-v`` names PEFT's own default modules where PEFT has a default, and PEFT builds exactly the
    adapters ``probes.adapters`` prices for them."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS

    wrapped, profile = _peft_model(model_type, LoraTargets.QUERY_VALUE.value, tmp_path)
    names = lora_config_kwargs(profile, 4, LoraTargets.QUERY_VALUE.value)["target_modules"]
    if model_type in PEFT_DEFAULTS:
        assert set(names) == set(PEFT_DEFAULTS[model_type])
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    heads = sum(p.numel() for n, p in wrapped.named_parameters() if p.requires_grad and "lora_" not in n)
    assert trainable - heads == adapter_parameters(profile, 4, LoraTargets.QUERY_VALUE.value)
    assert adapter_parameters(profile, 4, LoraTargets.QUERY_VALUE.value) < adapter_parameters(
        profile, 4, LoraTargets.ATTENTION.value
    )


def test_query_value_adapters_on_a_fused_qkv_layer_are_one_clear_error(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", **_tiny("gpt2")}))
    with pytest.raises(UsageError, match="fused"):
        lora_config_kwargs(profile_model(str(path)), 4, LoraTargets.QUERY_VALUE.value)


def test_query_value_adapters_on_a_fused_layer_are_refused_where_the_plan_is_priced() -> None:
    """The rule method.lora-targets refuses what lora_config_kwargs cannot write, so no recommendation or estimate
    is one --emit cannot write; a plan that does not ask for q-v adapters is untouched."""
    fix = r"one fused layer \(c_attn\), which PEFT adapts whole: use --lora-targets attention \[method.lora-targets\]"
    with pytest.raises(UsageError, match=r"no plan can run with --method lora, --lora-targets q-v here: .*" + fix):
        recommend("gpt2", gpu="t4", method="lora", lora_targets="q-v")
    with pytest.raises(UsageError, match=r"^--lora-targets q-v: .*" + fix):
        estimate("gpt2", gpu="t4", method="lora", lora_targets="q-v")
    assert recommend("gpt2", gpu="t4", method="lora", lora_targets="attention").plan.lora_targets == "attention"
    assert estimate("gpt2", gpu="t4", method="lora", lora_targets="q-v", framework="litgpt").plan.lora_targets == "q-v"


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "opt", "t5", "bert", "gpt2"])
def test_all_linear_adapters_are_the_ones_advisor_counts(model_type, tmp_path) -> None:
    """PEFT's all-linear adapts every linear layer but the output head: the blocks' and a masked-LM head's h x h
    transform (what advisor counts), and GPT-2's fused c_attn (as above)."""
    wrapped, profile = _peft_model(model_type, LoraTargets.ALL_LINEAR.value, tmp_path)
    trainable = sum(p.numel() for n, p in wrapped.named_parameters() if p.requires_grad and "lora_" in n)
    h, layers = profile.hidden_size, profile.num_layers
    expected = adapter_parameters(profile, 4, LoraTargets.ALL_LINEAR.value)
    if model_type == "gpt2":
        expected -= 4 * 2 * h * layers
    assert trainable == expected


def test_attention_targets_of_an_unknown_model_type_are_one_line() -> None:
    rec = _rec("lora attention r=8 on a100-80gb")
    odd = rec.model_copy(update={"model": rec.model.model_copy(update={"model_type": "bloom"})})
    with pytest.raises(UsageError, match="--lora-targets all-linear"):
        render(odd, ["all"])


@pytest.mark.parametrize("name, compute", [("qlora on rtx-4090", "bfloat16")])
def test_qlora_quantization_config_is_transformers_bitsandbytesconfig(name, compute) -> None:
    import torch
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.auto import AutoHfQuantizer

    rec = _rec(name)
    kwargs = json.loads(render(rec, ["hf"])[MODEL_KWARGS_FILE])
    assert kwargs["dtype" if "dtype" in kwargs else "torch_dtype"] == "bfloat16"
    quant = kwargs["quantization_config"]
    params = set(inspect.signature(BitsAndBytesConfig.__init__).parameters)
    assert set(quant) <= params, set(quant) - params  # BitsAndBytesConfig ignores unknown keys: check them here
    config = BitsAndBytesConfig(**quant)
    assert config.load_in_4bit and not config.load_in_8bit
    assert (config.bnb_4bit_quant_type, config.bnb_4bit_use_double_quant) == ("nf4", True)
    assert config.bnb_4bit_compute_dtype == getattr(torch, compute)
    assert config.bnb_4bit_quant_storage == torch.uint8  # one GPU: bitsandbytes' packed default
    quantizer = AutoHfQuantizer.from_config(quant)  # what from_pretrained does with the dict
    assert type(quantizer).__name__ == "Bnb4BitHfQuantizer"
    fp16 = BitsAndBytesConfig(**model_kwargs(_with(rec, precision=Precision.FP16.value))["quantization_config"])
    assert fp16.bnb_4bit_compute_dtype == torch.float16
    for sharded in (Parallelism.ZERO_3, Parallelism.FSDP_FULL_SHARD):  # FSDP / ZeRO-3 flatten the 4-bit weights
        quant = model_kwargs(_with(rec, parallelism=sharded.value, num_gpus=2))["quantization_config"]
        assert BitsAndBytesConfig(**quant).bnb_4bit_quant_storage == torch.bfloat16


def test_model_kwargs_load_the_planned_dtype(tmp_path) -> None:
    """from_pretrained(**model_kwargs.json) gives the dtype and attention the memory model priced."""
    import torch

    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=50)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(str(tmp_path))
    rec = _rec("lora (auto) on rtx-4090")
    for weights, dtype in ((WeightsDtype.BF16, torch.bfloat16), (WeightsDtype.FP32, torch.float32)):
        precision = Precision.BF16
        kwargs = model_kwargs(_with(rec, weights_dtype=weights.value, precision=precision.value))
        net = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path), **kwargs)
        assert net.dtype == dtype
        assert net.config._attn_implementation == "sdpa"
    cpu = _with(rec, device="cpu", num_gpus=0, weights_dtype=WeightsDtype.FP32.value, attention="eager")
    assert model_kwargs(cpu)["attn_implementation"] == "eager"  # the plan's kernel, what its memory was priced with
    flash = _with(rec, attention="flash-attention-2")
    assert model_kwargs(flash)["attn_implementation"] == "flash_attention_2"


@pytest.mark.parametrize("optimizer", [o for o in Optimizer if o.spec.paged] + [Optimizer.ADAMW_8BIT])
def test_paged_and_8bit_optimizers_name_the_trainers_optim(optimizer) -> None:
    from transformers.training_args import OptimizerNames

    from helpers import build_training_arguments

    rec = _with(_rec("qlora on rtx-4090"), optimizer=optimizer.value)
    args = training_args(rec)
    assert args["optim"] == optimizer.spec.trainer_optim and args["optim"] in {o.value for o in OptimizerNames}
    built = build_training_arguments(args, rec)
    assert built.optim == OptimizerNames(optimizer.spec.trainer_optim) and built.bf16


def _deepspeed_config(cfg: dict, world_size: int):
    """DeepSpeed's own parsing and validation of a config (its pydantic models) at ``world_size`` ranks."""
    deepspeed = pytest.importorskip("deepspeed")
    from unittest import mock

    from deepspeed.runtime.config import DeepSpeedConfig

    with (
        mock.patch.object(deepspeed.runtime.config.dist, "get_rank", return_value=0),
        mock.patch.object(deepspeed.runtime.config.dist, "get_world_size", return_value=world_size),
    ):
        return DeepSpeedConfig(cfg)


@pytest.mark.parametrize("name", ["full, ZeRO-2 CPU offload on rtx-4090", "full, ZeRO-Infinity NVMe on rtx-4090"])
def test_single_gpu_offload_passes_deepspeeds_validation(name) -> None:
    rec = _rec(name)
    plan = rec.plan
    cfg = deepspeed_config(rec)
    ds = _deepspeed_config(cfg, plan.num_gpus)
    zero = ds.zero_config
    device = "nvme" if Offload.of(plan.offload).nvme else "cpu"
    offload = Offload.of(plan.offload)
    assert ds.zero_optimization_stage == Parallelism.of(plan.parallelism).stage == (3 if offload.parameters else 2)
    assert zero.offload_optimizer.device == device and zero.offload_optimizer.pin_memory  # enum values kept
    if offload.parameters:
        assert zero.offload_param.device == device and zero.offload_param.pin_memory
    if device == "nvme":
        assert str(zero.offload_optimizer.nvme_path) == str(zero.offload_param.nvme_path) == NVME_PATH
    assert cfg["optimizer"]["type"] == "AdamW"  # DeepSpeed's CPU Adam steps the offloaded states
    assert ds.train_batch_size == plan.global_batch_size


def test_offload_sections_are_valid_for_their_zero_stage() -> None:
    """DeepSpeed (config-json, "Optimizer offloading" / "Parameter offloading"): offload_optimizer at stages
    1-3, offload_param only at stage 3, NVMe only at stage 3 (ZeRO-Infinity)."""
    rec = _rec("full, ZeRO-2 CPU offload on rtx-4090")
    for parallelism in (p for p in Parallelism if p.deepspeed):
        for offload in (Offload.of(o) for o in parallelism.spec.offloads):
            cfg = deepspeed_config(_with(rec, parallelism=parallelism.value, offload=offload.value))
            zero = cfg["zero_optimization"]
            assert ("offload_optimizer" in zero) == offload.optimizer
            assert ("offload_param" in zero) == offload.parameters
            if "offload_param" in zero or offload.nvme:
                assert zero["stage"] == 3
            _deepspeed_config(cfg, 1)


def test_single_gpu_fsdp_offload_in_accelerate_and_the_trainer(tmp_path) -> None:
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig

    from helpers import build_training_arguments

    rec = _with(_rec("full, ZeRO-2 CPU offload on rtx-4090"), parallelism=Parallelism.FSDP_FULL_SHARD.value)
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(yaml.safe_dump(accelerate_config(rec)))
    cfg = ClusterConfig.from_yaml_file(str(path))
    assert str(cfg.distributed_type).endswith("FSDP") and cfg.num_processes == 1
    assert cfg.fsdp_config["fsdp_offload_params"] is True
    args = training_args(rec)
    offloads = args["fsdp_config"]["cpu_offload"] if "fsdp_config" in args else "offload" in args["fsdp"]
    assert offloads is True and build_training_arguments(args, rec).fsdp


@pytest.mark.parametrize("name", list(CASES))
def test_launch_script_loads_the_model_as_planned(name, tmp_path) -> None:
    rec = _rec(name)
    text = render(rec, ["torchrun"])["launch.sh"]
    sharded = Parallelism.of(rec.plan.parallelism).stage > 0
    assert ("torchrun --nnodes=1 --nproc-per-node=1 --standalone" in text) == sharded  # DeepSpeed needs a launcher
    assert MODEL_KWARGS_FILE in text
    assert (LORA_CONFIG_FILE in text) == Method.of(rec.plan.method).spec.adapters
    assert (NVME_PATH in text) == Offload.of(rec.plan.offload).nvme
    path = tmp_path / "launch.sh"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_every_hf_file_follows_the_method(tmp_path) -> None:
    """Change the method, rank, targets and weights, and every file that carries them follows."""
    rec = _rec("lora attention r=8 on a100-80gb")
    before = render(rec, ["all"])
    after = render(
        _with(
            rec,
            method=Method.QLORA.value,
            lora_rank=32,
            lora_targets=LoraTargets.ALL_LINEAR.value,
            weights_dtype=WeightsDtype.FP32.value,
        ),
        ["all"],
    )
    lora_before, lora_after = json.loads(before[LORA_CONFIG_FILE]), json.loads(after[LORA_CONFIG_FILE])
    assert (lora_before["r"], lora_after["r"], lora_after["lora_alpha"]) == (8, 32, 64)
    assert lora_after["target_modules"] == "all-linear" != lora_before["target_modules"]
    kw_before, kw_after = json.loads(before[MODEL_KWARGS_FILE]), json.loads(after[MODEL_KWARGS_FILE])
    assert "quantization_config" in kw_after and "quantization_config" not in kw_before
    assert set(kw_before.values()) >= {"bfloat16"} and "float32" in kw_after.values()
    assert "4-bit NF4" in after["launch.sh"] and "rank 32" in after["launch.sh"]


@pytest.mark.subprocess
def test_emitting_adapter_configs_stays_on_the_fast_path(tmp_path) -> None:
    """recommend --method qlora --emit all writes lora_config.json and the quantization config without importing
    torch, transformers, peft, bitsandbytes or textual."""
    import sys

    from cli_runner import ENV, ROOT

    code = f"""
import io, contextlib, sys
from advisor.app.cli import run
with contextlib.redirect_stdout(io.StringIO()):
    assert run(["recommend", "--model", "{LLAMA}", "--gpu", "rtx-4090", "--method", "qlora", "--json",
                "--emit", "all", "--out", {str(tmp_path)!r}]) == 0
print("HEAVY:" + ",".join(m for m in ("torch", "transformers", "peft", "bitsandbytes", "textual") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "HEAVY:"
    assert (tmp_path / LORA_CONFIG_FILE).exists() and "quantization_config" in (
        tmp_path / MODEL_KWARGS_FILE
    ).read_text()
