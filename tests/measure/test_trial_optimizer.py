"""A trial sharded with FSDP2 steps its DTensors with the optimizer the emitted files run (torchao's AdamW8bit for a
bitsandbytes 8-bit plan, torch's AdamW for the paged 32-bit one), not bitsandbytes', which fails on DTensors
(bitsandbytes issues 1633 and 89; rule optimizer.bitsandbytes-fsdp2). One source: the vocabulary's optimizer spec."""

from __future__ import annotations

import importlib.util
import inspect
import json

import pytest

pytestmark = pytest.mark.slow  # torch and transformers

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from advisor.app import api  # noqa: E402
from advisor.core.errors import UsageError  # noqa: E402
from advisor.core.vocabulary import OPTIMIZER_SPECS, Optimizer  # noqa: E402
from advisor.measure.dist_worker import KINDS, shards_dtensors  # noqa: E402
from advisor.measure.trainable import make_optimizer  # noqa: E402
from probes.hardware import HardwareProfile, read_host  # noqa: E402

from helpers import TINY_GPT2, cpu_plan  # noqa: E402

TORCHAO = importlib.util.find_spec("torchao") is not None


def test_sharded_trials_hold_dtensors_ddp_and_one_device_do_not() -> None:
    assert not shards_dtensors(None) and not shards_dtensors("ddp")
    assert all(shards_dtensors(kind) for kind in KINDS if kind != "ddp")
    assert {"zero-3", "fsdp-full-shard"} <= {kind for kind in KINDS if shards_dtensors(kind)}


def test_each_stand_in_is_the_class_the_trainer_builds_for_the_emitted_optim() -> None:
    """The trial's stand-in and the emitted ``optim`` name one class: torch's AdamW(fused) is what the Trainer builds
    for ``adamw_torch_fused``; for ``adamw_torch_8bit`` transformers imports torchao.optim's AdamW8bit."""
    from transformers import Trainer, TrainingArguments
    from transformers import trainer_optimizer

    for optimizer, spec in OPTIMIZER_SPECS.items():
        assert (spec.trainer_optim_dtensor is None) == (spec.dtensor_factory is None), optimizer
        if spec.dtensor_factory is None:
            continue
        module, name = spec.dtensor_factory.split(":")
        if spec.dtensor_package == "torchao":
            assert spec.trainer_optim_dtensor == "adamw_torch_8bit"
            assert f"from {module} import" in inspect.getsource(trainer_optimizer) and name == "AdamW8bit"
        else:
            args = TrainingArguments(output_dir="/tmp/unused", optim=spec.trainer_optim_dtensor, use_cpu=True)
            cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
            assert (cls.__module__.split(".")[:2], cls.__name__) == (module.split("."), name) and kwargs.get("fused")


def test_the_paged_32_bit_plan_steps_dtensors_with_torch_adamw() -> None:
    params = [torch.nn.Parameter(torch.zeros(4))]
    opt = make_optimizer(params, cpu_plan(optimizer="paged-adamw"), dtensors=True)
    assert type(opt) is torch.optim.AdamW and opt.defaults["foreach"]  # fused on CUDA, foreach on the CPU


@pytest.mark.skipif(TORCHAO, reason="torchao is installed here")
def test_an_8bit_plan_on_dtensors_names_torchao_when_it_is_missing() -> None:
    params = [torch.nn.Parameter(torch.zeros(4))]
    with pytest.raises(
        UsageError, match="8-bit Adam on FSDP2's DTensors needs the torchao package: pip install torchao"
    ):
        make_optimizer(params, cpu_plan(optimizer="adamw-8bit"), dtensors=True)


@pytest.mark.skipif(not TORCHAO, reason="torchao is not installed")
def test_an_8bit_plan_on_dtensors_builds_torchao_adamw8bit() -> None:
    from torchao.optim import AdamW8bit

    params = [torch.nn.Parameter(torch.zeros(256, 256))]
    assert isinstance(make_optimizer(params, cpu_plan(optimizer="adamw-8bit"), dtensors=True), AdamW8bit)


@pytest.mark.skipif(TORCHAO, reason="torchao is installed here")
def test_validate_refuses_a_sharded_8bit_trial_without_torchao_before_starting_ranks(tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_GPT2))
    plan = cpu_plan(parallelism="fsdp-full-shard", cpu_processes=2, optimizer=Optimizer.ADAMW_8BIT.value)
    with pytest.raises(UsageError, match="pip install torchao, or validate the plan with DDP"):
        api.validate(str(config), plan=plan, hardware=HardwareProfile(source="none", host=read_host()))
