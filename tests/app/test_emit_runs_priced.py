"""The emitted files run what the plan was priced with (issue 42): for a grid of recommended plans, every file of
``--emit all`` is loaded by the library that reads it (TrainingArguments and TRL's SFTConfig through
``HfArgumentParser.parse_json_file``, accelerate's config loader, DeepSpeed's config class, PEFT's ``LoraConfig``,
transformers' ``BitsAndBytesConfig``; the scripts through ``bash -n`` and shellcheck), and every setting the plan was
priced with is turned on in what they load."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack (tests/conftest.py)

from advisor.app.api import recommend
from advisor.app.emit import FILE_NAMES, emit, render
from advisor.app.emit_model import SFT_CONFIG_FILE, TRAINING_ARGS_FILE, config_file, plan_env
from advisor.app.emit_schedule import tokens_per_step
from advisor.core.dimensions import Setting
from advisor.core.errors import UsageError
from advisor.core.kernels import Attention, LossKernel
from advisor.core.vocabulary import Method, Optimizer, Parallelism
from rules.batch import WARMUP_RATIO

transformers = pytest.importorskip("transformers")

#: Recommended plans that reach for what the Trainer's files alone did not run: bitsandbytes' 8-bit AdamW under
#: FSDP2, fp8, activation offloading (TRL), QLoRA under FSDP (FSDP1), several nodes (Slurm), ZeRO-3 with NVMe offload,
#: fp16 on V100 / T4, Liger's layers, padding-free packing, a chunked loss.
GRID = {
    "gpt2 DDP": ("gpt2", dict(gpu="a100-80gb:8")),
    "70B FSDP2 8-bit AdamW": ("meta-llama/Llama-3.1-70B", dict(gpu="h100-sxm:8", seq_len=4096)),
    "8B fp8": ("meta-llama/Llama-3.1-8B", dict(gpu="h100-sxm:8", seq_len=4096, fp8=True)),
    "70B QLoRA activation offloading": (
        "meta-llama/Llama-3.1-70B",
        dict(gpu="rtx-a6000", seq_len=2048, global_batch_size=16),
    ),
    "Qwen3-14B FSDP activation offloading": ("Qwen/Qwen3-14B", dict(gpu="l40s:4", seq_len=8192, global_batch_size=32)),
    "70B QLoRA FSDP": ("meta-llama/Llama-3.1-70B", dict(gpu="rtx-4090:4", method="qlora", seq_len=2048)),
    "7B on 4 nodes": ("meta-llama/Llama-2-7b-hf", dict(gpu="a100-40gb:2", nodes=4)),
    "Llama-3-8B fp16 V100 FSDP2": ("meta-llama/Meta-Llama-3-8B", dict(gpu="v100-16gb:8", seq_len=2048)),
    "Mistral QLoRA T4": ("mistralai/Mistral-7B-v0.1", dict(gpu="t4", seq_len=2048)),
    "70B ZeRO-3 NVMe T4": ("meta-llama/Llama-3.1-70B", dict(gpu="t4")),
    "8B Liger layers": ("meta-llama/Llama-3.1-8B", dict(gpu="h100-sxm", seq_len=2048, loss_kernel="liger-layers")),
    "8B packing": (
        "meta-llama/Llama-3.1-8B",
        dict(gpu="h100-sxm", seq_len=8192, packing=True, attention="flash-attention-2"),
    ),
    "8B chunked loss": ("meta-llama/Llama-3.1-8B", dict(gpu="h100-sxm", seq_len=8192, loss_kernel="chunked")),
    "8B 128k context parallel": (
        "meta-llama/Llama-3.1-8B",
        dict(gpu="h100-sxm:8", seq_len=131072, global_batch_size=8),
    ),
}

_RECS: dict = {}


def _rec(name: str):
    if name not in _RECS:
        model, options = GRID[name]
        _RECS[name] = recommend(model, **options)
    return _RECS[name]


@contextmanager
def _as_planned(rec):
    """The GPU checks of TrainingArguments answered as the planned hardware would, the world size the plan's, and
    the environment the launch scripts export (fp8's accelerate variables)."""
    import transformers.training_args as ta

    gpu = rec.hardware.gpu
    with (
        mock.patch.object(ta, "is_torch_bf16_gpu_available", return_value=bool(gpu and gpu.bf16)),
        mock.patch.object(ta, "is_torch_tf32_available", return_value=bool(gpu and gpu.tf32)),
        mock.patch.object(ta, "enable_tf32"),
        mock.patch.object(
            transformers.TrainingArguments, "world_size", new=property(lambda self: rec.plan.data_parallel_size)
        ),
        mock.patch.dict(os.environ, plan_env(rec)),
    ):
        yield


def _parse(cls, path: Path, rec):
    from transformers import HfArgumentParser

    with _as_planned(rec):
        return HfArgumentParser(cls).parse_json_file(str(path))[0]  # unknown keys are refused


def _check_trainer(args, rec) -> None:
    """What TrainingArguments (or SFTConfig) turned on is what the plan was priced with."""
    plan = rec.plan
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (
        plan.micro_batch_size,
        plan.gradient_accumulation_steps,
    )
    if plan.fp8:  # accelerate's fp8 (its torchao backend), under bf16 autocast
        assert args.mixed_precision == "fp8" and not args.bf16 and not args.fp16
    else:
        assert args.mixed_precision == (plan.precision if plan.precision != "fp32" else "no")
    fsdp_config = args.fsdp_config or {}
    assert plan.gradient_checkpointing == bool(
        args.activation_checkpointing or fsdp_config.get("activation_checkpointing")
    )
    assert args.torch_compile == plan.torch_compile
    assert bool(args.use_liger_kernel) == LossKernel.of(plan.loss_kernel).spec.fused_layers
    from transformers.training_args import OptimizerNames

    optim = OptimizerNames(args.optim).value
    spec = Optimizer.of(plan.optimizer).spec
    if spec.state_bytes_per_param == 2:  # 8-bit states, as priced
        assert "8bit" in optim
    parallelism = Parallelism.of(plan.parallelism)
    if parallelism.fsdp:
        assert args.fsdp and int(fsdp_config["version"]) == (2 if plan.runs_fsdp2 else 1)
        if plan.runs_fsdp2:  # bitsandbytes' optimizers fail on DTensor parameters (bitsandbytes issues 1633, 89)
            assert "bnb" not in optim and not optim.startswith("paged")
        if Method.of(plan.method).spec.quantized_base:  # the measured FSDP + QLoRA recipe
            assert fsdp_config["version"] == 1 and fsdp_config["use_orig_params"] is False
    if parallelism.deepspeed:
        assert args.deepspeed == FILE_NAMES["deepspeed"]
    _check_schedule(args, rec)


def _check_schedule(args, rec, max_steps: int = -1) -> None:
    """The learning rate, warm-up and run length the rule set (batch.recipe-learning-rate) are what was loaded."""
    assert args.learning_rate == rec.value(Setting.LEARNING_RATE) and 1e-6 < args.learning_rate < 1e-3
    assert (getattr(args, "warmup_ratio", None) or args.warmup_steps) == WARMUP_RATIO  # warmup_steps from 5 on
    assert args.max_steps == max_steps
    if max_steps == -1:
        assert args.num_train_epochs == rec.value(Setting.NUM_TRAIN_EPOCHS) == 3


def _check_accelerate(path: Path, rec) -> None:
    from accelerate.commands.config.config_args import ClusterConfig

    cfg, plan = ClusterConfig.from_yaml_file(str(path)), rec.plan
    assert (cfg.num_processes, cfg.num_machines) == (max(plan.num_gpus, 1), rec.hardware.nodes)
    assert cfg.mixed_precision == ("fp8" if plan.fp8 else plan.precision if plan.precision != "fp32" else "no")
    if plan.fp8:
        assert cfg.fp8_config == {"backend": "AO"}
    parallelism = Parallelism.of(plan.parallelism)
    kind = str(cfg.distributed_type).split(".")[-1]
    assert kind == (
        "DEEPSPEED"
        if parallelism.deepspeed
        else "FSDP"
        if parallelism.fsdp
        else "MULTI_GPU"
        if plan.num_gpus > 1
        else "NO"
    )
    if parallelism.fsdp:
        assert cfg.fsdp_config["fsdp_version"] == (2 if plan.runs_fsdp2 else 1)
        assert cfg.fsdp_config["fsdp_cpu_ram_efficient_loading"] is not plan.fp8  # accelerate refuses both with AO
    assert ("dynamo_backend" in (cfg.dynamo_config or {})) == plan.torch_compile
    _check_context_parallel(cfg, rec)


def _check_context_parallel(cfg, rec) -> None:
    """A context-parallel plan: accelerate's ParallelismConfig, built as ``accelerate launch`` builds it (from the
    YAML's sizes) and as the Trainer builds it under launch.sh's torchrun (from the exported environment), splits
    each sequence over the plan's ranks and shards FSDP2 over the rest."""
    plan = rec.plan
    if plan.context_parallel <= 1:
        assert not cfg.parallelism_config
        return
    from accelerate.parallelism_config import ParallelismConfig

    sizes = {k.removeprefix("parallelism_config_"): v for k, v in cfg.parallelism_config.items()}
    with mock.patch.dict(os.environ, plan_env(rec)):
        for pc in (ParallelismConfig(**sizes), ParallelismConfig()):
            assert pc.cp_enabled and pc.cp_size == plan.context_parallel
            assert pc.total_size == plan.num_gpus and pc.dp_shard_size == plan.data_parallel_size
    assert plan.runs_fsdp2 and cfg.fsdp_config["fsdp_version"] == 2


def _check_deepspeed(path: Path, rec) -> None:
    deepspeed = pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    plan = rec.plan
    with (
        mock.patch.object(deepspeed.runtime.config.dist, "get_rank", return_value=0),
        mock.patch.object(deepspeed.runtime.config.dist, "get_world_size", return_value=plan.num_gpus),
    ):
        ds = DeepSpeedConfig(json.loads(path.read_text()))
    assert ds.train_batch_size == plan.global_batch_size
    assert ds.zero_optimization_stage == Parallelism.of(plan.parallelism).stage
    assert ds.float16_config.enabled == (plan.precision == "fp16")
    assert ds.bfloat16_config.enabled == (plan.precision == "bf16")
    config = json.loads(path.read_text())  # no scheduler of its own: the Trainer's, from training_args.json
    assert "scheduler" not in config and config.get("optimizer", {}).get("params", {}).get("lr", "auto") == "auto"
    offload = plan.offload
    if offload != "none":
        assert str(ds.zero_config.offload_optimizer.device).endswith("nvme" if offload == "nvme" else "cpu")


def _check_adapters(folder: Path, rec) -> None:
    plan = rec.plan
    lora = folder / "lora_config.json"
    assert lora.exists() == Method.of(plan.method).spec.adapters
    if lora.exists():
        peft = pytest.importorskip("peft")
        config = peft.LoraConfig(**json.loads(lora.read_text()))
        assert config.r == plan.lora_rank and config.target_modules
    kwargs = json.loads((folder / "model_kwargs.json").read_text())
    assert kwargs["attn_implementation"] == Attention.of(plan.attention).spec.implementation
    if Method.of(plan.method).spec.quantized_base:
        bnb = transformers.BitsAndBytesConfig(**kwargs["quantization_config"])
        assert bnb.load_in_4bit and bnb.bnb_4bit_use_double_quant == plan.double_quant


def _shellcheck() -> str | None:
    found = Path(sys.executable).parent / "shellcheck"
    return str(found) if found.exists() else shutil.which("shellcheck")


def _check_script(path: Path) -> None:
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    tool = _shellcheck()
    if tool is not None:
        res = subprocess.run([tool, "--shell=bash", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("name", list(GRID))
def test_the_emitted_files_run_what_the_plan_was_priced_with(name, tmp_path, monkeypatch) -> None:
    rec = _rec(name)
    assert rec.estimate_only is None, rec.estimate_only  # the grid's plans are all emitted
    folder = tmp_path / "cfg"
    written = {p.name for p in emit(rec, ["all"], folder)}
    monkeypatch.chdir(folder)  # training_args.json names ds_config.json relative to the configs' folder
    _check_trainer(_parse(transformers.TrainingArguments, folder / TRAINING_ARGS_FILE, rec), rec)
    trl = pytest.importorskip("trl")
    sft = _parse(trl.SFTConfig, folder / SFT_CONFIG_FILE, rec)
    _check_trainer(sft, rec)
    plan = rec.plan
    assert sft.activation_offloading == plan.activation_offloading  # TRL runs what the Trainer cannot
    assert sft.packing == sft.padding_free == plan.packing and sft.max_length == rec.workload.seq_len
    assert sft.model_init_kwargs == json.loads((folder / "model_kwargs.json").read_text())
    if plan.activation_offloading or plan.loss_kernel == LossKernel.CHUNKED:
        assert rec.hand_off and "--emit trl" in rec.hand_off and config_file(rec) == SFT_CONFIG_FILE
    _check_accelerate(folder / FILE_NAMES["accelerate"], rec)
    assert (FILE_NAMES["deepspeed"] in written) == Parallelism.of(plan.parallelism).deepspeed
    if FILE_NAMES["deepspeed"] in written:
        _check_deepspeed(folder / FILE_NAMES["deepspeed"], rec)
    _check_adapters(folder, rec)
    launch = folder / FILE_NAMES["torchrun"]
    _check_script(launch)
    assert f'"$SCRIPT" {config_file(rec)} "$@"' in launch.read_text()
    for variable, value in plan_env(rec).items():
        assert f"export {variable}={value}" in launch.read_text()
    assert (FILE_NAMES["slurm"] in written) == (rec.hardware.nodes > 1)
    slurm = folder / FILE_NAMES["slurm"]
    if not slurm.exists():
        slurm.write_text(render(rec, ["slurm"])[FILE_NAMES["slurm"]])  # asked for on one node: it runs there too
    _check_slurm(slurm, rec)


def _check_slurm(path: Path, rec) -> None:
    _check_script(path)
    text, plan, nodes = path.read_text(), rec.plan, rec.hardware.nodes
    per_node = plan.num_gpus // nodes
    for words in (
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={per_node}",
        f"srun torchrun --nnodes={nodes} --nproc-per-node={per_node}",
        "--rdzv-backend=c10d",
        '--rdzv-endpoint="$head_node:29500"',
        f'"$SCRIPT" {config_file(rec)} "$@"',
    ):
        assert words in text, words
    for variable, value in plan_env(rec).items():
        assert f"export {variable}={value}" in text


def test_the_trainer_s_files_alone_are_refused_for_a_plan_only_trl_runs() -> None:
    rec = _rec("70B QLoRA activation offloading")
    with pytest.raises(UsageError, match="--emit trl runs activation_offloading"):
        render(rec, ["hf"])
    assert {TRAINING_ARGS_FILE, SFT_CONFIG_FILE} <= set(render(rec, ["hf", "trl"]))
    assert "launch.sh" in render(rec, ["torchrun"])  # the launcher alone: it hands over sft_config.json


def test_a_slurm_script_quotes_what_it_writes(tmp_path) -> None:
    """A model id with shell metacharacters cannot reach the script unquoted (the job name keeps safe characters)."""
    rec = _rec("7B on 4 nodes")
    odd = rec.model_copy(update={"model": rec.model.model_copy(update={"id": "org/$(touch pwned);`x` name"})})
    path = tmp_path / "launch.slurm"
    path.write_text(render(odd, ["slurm"])["launch.slurm"])
    _check_script(path)
    assert "#SBATCH --job-name=advisor--touch-pwned-x-name" in path.read_text()


@pytest.mark.parametrize("name", ["gpt2 DDP", "70B QLoRA FSDP"])
def test_a_run_of_n_tokens_is_max_steps(name, tmp_path, monkeypatch) -> None:
    """``--tokens N``: the run's length in optimizer steps, N over the plan's tokens per step, rounded up; the
    learning rate as without it."""
    rec = _rec(name)
    emit(rec, ["hf", "trl"], tmp_path, tokens=10**9)
    monkeypatch.chdir(tmp_path)
    steps = -(-(10**9) // tokens_per_step(rec))
    assert steps * tokens_per_step(rec) >= 10**9 > (steps - 1) * tokens_per_step(rec)
    _check_schedule(_parse(transformers.TrainingArguments, tmp_path / TRAINING_ARGS_FILE, rec), rec, steps)
    trl = pytest.importorskip("trl")
    _check_schedule(_parse(trl.SFTConfig, tmp_path / SFT_CONFIG_FILE, rec), rec, steps)
    with pytest.raises(UsageError, match="--tokens must be a whole number"):
        render(rec, ["hf", "trl"], tokens=0)
