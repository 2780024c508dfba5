"""Emitted configs: every file is accepted by the tool that reads it, and follows the recommendation."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from unittest import mock

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)
import yaml

from advisor.app.api import recommend
from advisor.app.manifest import MANIFEST_FILE
from advisor.app.emit import (
    FILE_NAMES,
    MODEL_KWARGS_FILE,
    accelerate_config,
    deepspeed_config,
    emit,
    render,
    training_args,
    transformers_version,
)
from advisor.engine.recommendation import Recommendation
from helpers import build_training_arguments
from advisor.core.errors import UsageError

transformers = pytest.importorskip("transformers")

CASES = {  # name -> recommend() arguments
    "gpt2 on a100-80gb:8 (DDP)": dict(model="gpt2", gpu="a100-80gb:8"),
    # without torch.compile (which the Trainer does not apply to a DeepSpeed engine); FSDP2 wins it (4 % faster than
    # ZeRO-2 with its capped allocator reserve), so the plan is sharded with ZeRO-2 instead: the DeepSpeed files
    "Llama-2-7B on a100-80gb:8 (ZeRO)": dict(
        model="meta-llama/Llama-2-7b-hf", gpu="a100-80gb:8", torch_compile=False, as_parallelism="zero-2"
    ),
    "Llama-2-7B on a100-40gb:2 x 4 nodes": dict(
        model="meta-llama/Llama-2-7b-hf", gpu="a100-40gb:2", nodes=4, torch_compile=False
    ),
    "bert-large on v100-16gb (fp16)": dict(model="bert-large-uncased", gpu="v100-16gb", seq_len=512),
    "Llama-2-7B on one a100-80gb (Adafactor, checkpointing)": dict(
        model="meta-llama/Llama-2-7b-hf", gpu="a100-80gb", seq_len=2048
    ),
    "gpt2 on the CPU": dict(model="gpt2", gpu=None, seq_len=128, global_batch_size=8),
    # Liger's layers with the model's own loss: use_liger_kernel and liger_kernel_config
    "Llama-3.1-8B on h100-sxm (Liger's layers)": dict(
        model="meta-llama/Llama-3.1-8B", gpu="h100-sxm", seq_len=2048, loss_kernel="liger-layers"
    ),
}


def _rec(name: str) -> Recommendation:
    kw = dict(CASES[name])
    model, as_parallelism = kw.pop("model"), kw.pop("as_parallelism", None)
    if kw.get("gpu") is None:
        from probes.hardware import HardwareProfile, HostInfo

        kw.pop("gpu")
        kw["hardware"] = HardwareProfile(
            source="none", host=HostInfo(cpu_cores=8, ram_bytes=64 * 2**30, cpu_flags=["avx2", "fma"])
        )
    rec = recommend(model, **kw)
    if as_parallelism:
        rec = rec.model_copy(update={"plan": rec.plan.model_copy(update={"parallelism": as_parallelism})})
    return rec


@pytest.mark.parametrize("name", list(CASES))
def test_training_args_are_trainingarguments_fields_and_build(name) -> None:
    rec = _rec(name)
    args = training_args(rec)
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    assert set(args) <= fields, set(args) - fields
    from transformers.training_args import OptimizerNames

    assert args["optim"] in {o.value for o in OptimizerNames}
    if "deepspeed" in args:  # the Trainer reads the file relative to the working directory: give it the dict
        pytest.importorskip("deepspeed")
        args = {**args, "deepspeed": deepspeed_config(rec)}
    built = build_training_arguments(args, rec)
    assert built.per_device_train_batch_size == rec.plan.micro_batch_size
    assert built.gradient_accumulation_steps == rec.plan.gradient_accumulation_steps
    assert built.bf16 == (rec.plan.precision == "bf16") and built.fp16 == (rec.plan.precision == "fp16")
    assert built.gradient_checkpointing == rec.plan.gradient_checkpointing
    assert built.liger_kernel_config == args.get("liger_kernel_config")  # Liger's layers without its fused loss


@pytest.mark.parametrize("name", list(CASES))
def test_accelerate_loads_the_config(name, tmp_path) -> None:
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig

    rec = _rec(name)
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(yaml.safe_dump(accelerate_config(rec)))
    cfg = ClusterConfig.from_yaml_file(str(path))
    assert cfg.num_processes == max(rec.plan.num_gpus, 1) and cfg.num_machines == rec.hardware.nodes
    assert cfg.mixed_precision == ("no" if rec.plan.precision == "fp32" else rec.plan.precision)
    assert cfg.use_cpu == (rec.plan.device == "cpu")
    expected = (
        "DEEPSPEED"
        if rec.plan.parallelism.startswith("zero")
        else "FSDP"
        if rec.plan.parallelism.startswith("fsdp")
        else "MULTI_GPU"
        if rec.plan.num_gpus > 1
        else "NO"
    )
    assert str(cfg.distributed_type).split(".")[-1] == expected


DS_DOCUMENTED_KEYS = {  # https://www.deepspeed.ai/docs/config-json/
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "optimizer",
    "fp16",
    "bf16",
    "zero_optimization",
}
DS_ZERO_KEYS = {
    "stage",
    "overlap_comm",
    "contiguous_gradients",
    "offload_optimizer",
    "offload_param",
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_prefetch_bucket_size",
}


@pytest.mark.parametrize("name", [n for n in CASES if "Llama-2-7B on a100" in n and "one" not in n])
def test_deepspeed_config_passes_deepspeeds_own_validation(name) -> None:
    rec = _rec(name)
    if not rec.plan.parallelism.startswith("zero"):  # the planner chose FSDP here: check the ZeRO-3 config
        rec = rec.model_copy(update={"plan": rec.plan.model_copy(update={"parallelism": "zero-3"})})
    cfg = deepspeed_config(rec)
    plan = rec.plan
    assert cfg["train_batch_size"] == plan.micro_batch_size * plan.gradient_accumulation_steps * plan.num_gpus
    assert set(cfg) <= DS_DOCUMENTED_KEYS and set(cfg["zero_optimization"]) <= DS_ZERO_KEYS
    assert cfg["zero_optimization"]["stage"] == int(plan.parallelism[-1])
    deepspeed = pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    with (
        mock.patch.object(deepspeed.runtime.config.dist, "get_rank", return_value=0),
        mock.patch.object(deepspeed.runtime.config.dist, "get_world_size", return_value=plan.num_gpus),
    ):
        ds = DeepSpeedConfig(cfg)
    assert ds.train_batch_size == plan.global_batch_size and ds.zero_optimization_stage == int(plan.parallelism[-1])
    # the buckets the memory model priced (hidden_size², the Trainer's "auto"), as DeepSpeed reads them
    zero = ds.zero_config
    assert zero.reduce_bucket_size == rec.model.hidden_size**2 == 4096**2
    assert zero.prefetch_bucket_size == int(0.9 * 4096**2) if zero.stage == 3 else zero.allgather_bucket_size == 4096**2
    with (
        mock.patch.object(deepspeed.runtime.config.dist, "get_rank", return_value=0),
        mock.patch.object(deepspeed.runtime.config.dist, "get_world_size", return_value=plan.num_gpus),
        pytest.raises(AssertionError),
    ):  # DeepSpeed's check bites: a wrong train_batch_size is refused
        DeepSpeedConfig({**cfg, "train_batch_size": cfg["train_batch_size"] * 2})


def test_offload_plan_gets_deepspeeds_cpu_optimizer() -> None:
    rec = _rec("Llama-2-7B on a100-80gb:8 (ZeRO)")
    plan = rec.plan.model_copy(update={"parallelism": "zero-3", "offload": "optimizer+parameters"})
    cfg = deepspeed_config(rec.model_copy(update={"plan": plan}))
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert cfg["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert cfg["optimizer"]["type"] == "AdamW"


def test_launch_scripts(tmp_path) -> None:
    one = render(_rec("bert-large on v100-16gb (fp16)"), ["torchrun"])["launch.sh"]
    assert "exec python" in one and "torchrun" not in one
    ddp = render(_rec("gpt2 on a100-80gb:8 (DDP)"), ["torchrun"])["launch.sh"]
    assert "torchrun --nnodes=1 --nproc-per-node=8 --standalone" in ddp
    assert "NCCL_P2P_DISABLE" not in ddp  # NVLink: never disable peer-to-peer
    multi = render(_rec("Llama-2-7B on a100-40gb:2 x 4 nodes"), ["torchrun"])["launch.sh"]
    assert "--nnodes=4 --nproc-per-node=2" in multi and "MASTER_ADDR" in multi and "NODE_RANK" in multi
    for text in (one, ddp, multi):
        path = tmp_path / "launch.sh"
        path.write_text(text)
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_every_file_follows_the_recommendation(tmp_path) -> None:
    """One source of truth: change the recommendation, and every file that carries a value follows."""
    rec = _rec("Llama-2-7B on a100-80gb:8 (ZeRO)")
    changed_plan = rec.plan.model_copy(
        update={
            "micro_batch_size": 2,
            "gradient_accumulation_steps": 4,
            "precision": "fp16",
            "gradient_checkpointing": True,
            "parallelism": "zero-3",
        }
    )
    settings = dict(rec.settings)
    settings["dataloader_num_workers"] = settings["dataloader_num_workers"].model_copy(update={"value": 7})
    changed = rec.model_copy(update={"plan": changed_plan, "settings": settings})
    before = {p.name: p.read_text() for p in emit(rec, ["all"], tmp_path / "a")}
    after = {p.name: p.read_text() for p in emit(changed, ["all"], tmp_path / "b")}
    # all: every target the plan uses (the Slurm script only on several nodes), and the folder's manifest
    assert (
        set(before)
        == set(after)
        == {*FILE_NAMES.values(), MODEL_KWARGS_FILE, MANIFEST_FILE, "plan.json", "train.py"} - {FILE_NAMES["slurm"]}
    )
    args = json.loads(after["training_args.json"])
    assert (
        args["per_device_train_batch_size"],
        args["gradient_accumulation_steps"],
        args["fp16"],
        args["bf16"],
        args["dataloader_num_workers"],
        args["torch_compile"],
    ) == (2, 4, True, False, 7, False)
    assert any(v is True for k, v in args.items() if k.endswith("checkpointing"))
    ds = json.loads(after["ds_config.json"])
    assert (
        ds["train_micro_batch_size_per_gpu"],
        ds["gradient_accumulation_steps"],
        ds["train_batch_size"],
        ds["zero_optimization"]["stage"],
        ds["fp16"]["enabled"],
    ) == (2, 4, 64, 3, True)
    acc = yaml.safe_load(after["accelerate_config.yaml"])
    assert acc["mixed_precision"] == "fp16" and acc["deepspeed_config"]["zero3_init_flag"] is True
    assert "dynamo_config" not in acc  # DeepSpeed plans do not compile (rules/compile.py)
    compiled = rec.model_copy(
        update={"plan": rec.plan.model_copy(update={"parallelism": "fsdp-full-shard", "torch_compile": True})}
    )
    assert accelerate_config(compiled)["dynamo_config"] == {"dynamo_backend": "INDUCTOR"}
    assert training_args(compiled)["torch_compile"] is True
    assert "micro-batch 2 x 4" in after["launch.sh"] and "fp16" in after["launch.sh"]
    # model_kwargs.json carries the weights' dtype and the attention, which this change keeps (both fp32 weights on
    # CUDA); tests/app/test_emit_adapters.py changes them and sees it follow
    assert all(before[n] != after[n] for n in before if n not in (MODEL_KWARGS_FILE, MANIFEST_FILE, "train.py"))


def test_emit_errors_and_the_cli(tmp_path) -> None:
    with pytest.raises(UsageError, match="not ZeRO"):
        render(_rec("gpt2 on a100-80gb:8 (DDP)"), ["deepspeed"])
    assert "ds_config.json" not in render(_rec("gpt2 on a100-80gb:8 (DDP)"), ["all"])
    from cli_runner import advisor

    out = tmp_path / "cfg"
    res = advisor("recommend", "--model", "gpt2", "--gpu", "a100-80gb:8", "--emit", "all", "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    rec = Recommendation.model_validate_json(res.stdout)  # stdout stays the recommendation's JSON
    assert sorted(p.name for p in out.iterdir()) == [
        ".advisor-emitted.json",
        "accelerate_config.yaml",
        "launch.sh",
        MODEL_KWARGS_FILE,
        "plan.json",
        "sft_config.json",
        "train.py",
        "training_args.json",
    ]
    assert json.loads((out / "training_args.json").read_text()) == training_args(rec)
    assert Recommendation.model_validate_json((out / "plan.json").read_text()) == rec  # what the callback reads
    assert (out / "launch.sh").stat().st_mode & 0o111
    assert f"wrote {out / 'launch.sh'}" in res.stderr
    bad = advisor("recommend", "--model", "gpt2", "--gpu", "a100-80gb:8", "--emit", "deepspeed")
    assert bad.returncode == 2 and "not ZeRO" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    for flags, words in ((["--tokens", "1e9"], "add --emit"), (["--emit", "hf", "--tokens", "0"], "must be from 1")):
        bad = advisor("recommend", "--model", "gpt2", "--gpu", "a100-80gb:8", "--out", str(tmp_path / "x"), *flags)
        assert bad.returncode == 2 and words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    res = advisor(
        "recommend",
        "--model",
        "gpt2",
        "--gpu",
        "a100-80gb:8",
        "--emit",
        "hf",
        "--out",
        str(out),
        "--tokens",
        "1e9",
        "--json",
    )
    args = json.loads((out / "training_args.json").read_text())  # a billion tokens at 64 x 1024 tokens a step
    assert res.returncode == 0 and args["max_steps"] == -(-(10**9) // (64 * 1024)) and "num_train_epochs" not in args


def test_readme_api_example_holds() -> None:
    """The README's Python API lines return what they say."""
    import advisor

    rec = advisor.recommend("gpt2", gpu="a100-80gb", seq_len=1024, global_batch_size=64)
    assert (rec.plan.precision, rec.plan.micro_batch_size) == ("bf16", 64)
    assert rec.settings["optimizer"].alternatives[0].reason
    assert type(advisor.estimate("gpt2", gpu="t4", micro_batch_size=8)).__name__ == "Estimate"
    assert advisor.profile_model("meta-llama/Llama-2-7b-hf").num_parameters == 6_738_415_616
    assert set(advisor.__all__) == {"recommend", "estimate", "validate", "probe_hardware", "profile_model"}


@pytest.mark.parametrize("strategy", ["fsdp-shard-grad-op", "fsdp-full-shard", "fsdp-hybrid-shard"])
def test_fsdp_plans_emit_trainer_and_accelerate_fsdp_settings(strategy, tmp_path) -> None:
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig

    rec = _rec("Llama-2-7B on a100-40gb:2 x 4 nodes")
    offload = "optimizer+parameters" if strategy != "fsdp-shard-grad-op" else "none"
    rec = rec.model_copy(update={"plan": rec.plan.model_copy(update={"parallelism": strategy, "offload": offload})})
    args = training_args(rec)
    assert "deepspeed" not in args and args["fsdp"]
    built = build_training_arguments(args, rec)
    assert built.fsdp
    # with accumulation every micro-batch reduce-scatters (the gradients stay sharded, as the memory figure assumed)
    assert (rec.plan.gradient_accumulation_steps > 1) == bool(
        built.accelerator_config.gradient_accumulation_kwargs
        and built.accelerator_config.gradient_accumulation_kwargs["sync_each_batch"]
    )
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(yaml.safe_dump(accelerate_config(rec)))
    cfg = ClusterConfig.from_yaml_file(str(path))
    assert str(cfg.distributed_type).endswith("FSDP")
    assert (
        cfg.fsdp_config["fsdp_sharding_strategy"]
        == {
            "fsdp-shard-grad-op": "SHARD_GRAD_OP",
            "fsdp-full-shard": "FULL_SHARD",
            "fsdp-hybrid-shard": "HYBRID_SHARD",
        }[strategy]
    )
    assert cfg.fsdp_config["fsdp_offload_params"] == (offload != "none")
    assert "ds_config.json" not in render(rec, ["all"])


@pytest.mark.parametrize(
    ("strategy", "fsdp_version", "written"),
    [("fsdp-full-shard", 2, 2), ("fsdp-full-shard", 1, 1), ("fsdp-shard-grad-op", 1, 1), ("fsdp-hybrid-shard", 2, 1)],
)
def test_the_fsdp_a_plan_is_priced_for_is_the_one_it_runs(strategy, fsdp_version, written) -> None:
    """FSDP2 unless the plan says ``fsdp_version`` 1 (priced with FSDP1's uncapped allocator reserve) or shards
    HYBRID_SHARD, which the Trainer runs on FSDP1 (:attr:`advisor.core.plan.Plan.runs_fsdp2`)."""
    if transformers_version()[0] < 5:
        pytest.skip("transformers < 5 takes the FSDP1 option string")
    rec = _rec("Llama-2-7B on a100-40gb:2 x 4 nodes")
    rec = rec.model_copy(
        update={"plan": rec.plan.model_copy(update={"parallelism": strategy, "fsdp_version": fsdp_version})}
    )
    args = training_args(rec)
    assert args["fsdp_config"]["version"] == written == (2 if rec.plan.runs_fsdp2 else 1)
    assert accelerate_config(rec)["fsdp_config"]["fsdp_version"] == written  # accelerate launch's too
    assert build_training_arguments(args, rec).fsdp


def test_an_sgd_plan_gets_the_momentum_it_was_priced_with() -> None:
    """advisor prices SGD with a momentum buffer (4 B/param, the parameters' dtype); the Trainer's ``optim="sgd"``
    alone builds torch SGD with momentum 0 and no state, so the recipe passes ``optim_args``."""
    rec = _rec("gpt2 on a100-80gb:8 (DDP)")
    rec = rec.model_copy(update={"plan": rec.plan.model_copy(update={"optimizer": "sgd"})})
    args = training_args(rec)
    assert (args["optim"], args["optim_args"]) == ("sgd", "momentum=0.9")
    cls, kwargs = transformers.Trainer.get_optimizer_cls_and_kwargs(build_training_arguments(args, rec))
    assert cls.__name__ == "SGD" and kwargs["momentum"] == 0.9
    adamw = training_args(_rec("gpt2 on a100-80gb:8 (DDP)"))
    assert "optim_args" not in adamw
