"""Activation offloading (TRL's / torchtune's OffloadActivations): what it keeps on the GPU, what it pins in CPU RAM,
what its copies cost, when the planner takes it, and what a trial needs to run it."""

from __future__ import annotations

import importlib.util  # noqa: F401 (read by the skipif condition's string, evaluated in this module's namespace)

import pytest

from advisor.app import api
from advisor.engine.communication import PCIE_GBPS, activation_offload_seconds
from advisor.engine.memory import OFFLOAD_RESIDENT, offload_host_bytes, offloaded_activation_bytes
from advisor.engine.planner import search
from advisor.core.errors import UsageError
from advisor.core.units import GIB

LLAMA = "meta-llama/Llama-3.1-8B"
LORA = dict(method="lora", precision="bf16", weights_dtype="bf16")


def _estimate(**settings):
    return api.estimate(LLAMA, gpu="h100-sxm", seq_len=8192, **{**LORA, **settings})


def test_with_checkpointing_it_keeps_one_block_input_on_the_gpu_and_pins_the_rest() -> None:
    kept = _estimate(gradient_checkpointing=True)
    offloaded = _estimate(gradient_checkpointing=True, activation_offloading=True)
    model, plan = offloaded.model, offloaded.plan
    moved = offloaded_activation_bytes(model, plan, 8192)
    block_input = 8192 * model.hidden_size * 2  # one bf16 residual-stream tensor
    # the blocks' inputs but OFFLOAD_RESIDENT move to CPU RAM: (layers - 1) inputs, within the calibration's rounding
    assert moved == pytest.approx((model.num_layers - OFFLOAD_RESIDENT) * block_input, rel=0.05)
    assert kept.memory.components.activations_bytes - offloaded.memory.components.activations_bytes == moved
    assert kept.memory.device_bytes > offloaded.memory.device_bytes
    # pinned host RAM: what moved, each 64 MiB tensor already a power of two
    assert offloaded.memory.host_bytes == offload_host_bytes(model, plan, 8192) == moved
    assert kept.memory.host_bytes == 0


def test_without_checkpointing_it_keeps_about_one_block() -> None:
    full = _estimate()
    offloaded = _estimate(activation_offloading=True)
    layers = full.model.num_layers
    per_block = offloaded_activation_bytes(offloaded.model, offloaded.plan, 8192) / (layers - OFFLOAD_RESIDENT)
    assert full.memory.components.activations_bytes > layers * per_block
    assert offloaded.memory.components.activations_bytes < full.memory.components.activations_bytes / 4


def test_checkpointed_copies_cost_their_way_back_and_full_ones_far_more_on_an_h100() -> None:
    """Beside checkpointing one tensor a block crosses PCIe: the forward hides its copy, the backward waits for its
    copy back (a few % of the step; the H100 measured 13-15 %); without checkpointing every saved tensor crosses,
    which PCIe 5 carries slower than an H100 computes."""
    ckpt = _estimate(gradient_checkpointing=True)
    ckpt_offload = _estimate(gradient_checkpointing=True, activation_offloading=True)
    offload = _estimate(activation_offloading=True)
    moved = offloaded_activation_bytes(ckpt_offload.model, ckpt_offload.plan, 8192) * ckpt_offload.plan.micro_batch_size
    back = moved / (PCIE_GBPS[5] * 1e9) * ckpt_offload.plan.gradient_accumulation_steps
    assert ckpt_offload.speed.step_time_s - ckpt.speed.step_time_s == pytest.approx(back, rel=0.02)
    assert 1.02 < ckpt_offload.speed.step_time_s / ckpt.speed.step_time_s < 1.15
    assert offload.speed.step_time_s > 1.5 * ckpt.speed.step_time_s


def test_the_forward_copy_hides_behind_the_forward_and_the_backward_copy_is_exposed() -> None:
    class Gpu:  # what activation_offload_seconds reads of a GPUInfo
        pcie_generation = 4

    one_way = 48e9 / (PCIE_GBPS[4] * 1e9)  # 2 s each way
    assert activation_offload_seconds(48e9, 30.0, 0.0, Gpu()) == pytest.approx(one_way)  # 10 s forward hides it
    assert activation_offload_seconds(48e9, 3.0, 0.0, Gpu()) == pytest.approx(one_way - 1.0 + one_way)  # 1 s forward
    assert activation_offload_seconds(48e9, 4.0, 1.0, Gpu()) == pytest.approx(one_way - 1.0 + one_way)  # recomputed
    assert activation_offload_seconds(0, 3.0, 0.0, Gpu()) == activation_offload_seconds(48e9, 3.0, 0.0, None) == 0.0


def test_the_planner_offloads_only_when_nothing_without_it_fits() -> None:
    assert not search(
        api.make_facts(LLAMA, gpu="rtx-4090", seq_len=2048, global_batch_size=8)
    ).best.plan.activation_offloading
    rec = api.recommend(LLAMA, gpu="a100-80gb", seq_len=65536, global_batch_size=8, method="lora")
    assert rec.plan.activation_offloading
    decision = rec.settings["activation_offloading"]
    assert "only when they are what does not fit" in decision.rationale
    assert all(a.reason.startswith("does not fit") for a in decision.alternatives)


def test_the_cpu_and_pipelines_refuse_it() -> None:
    with pytest.raises(UsageError, match="in RAM already"):
        api.estimate("gpt2", gpu=None, activation_offloading=True)
    with pytest.raises(UsageError, match="pipeline parallel size 1"):
        api.estimate(LLAMA, gpu="a100-80gb:2", nodes=2, pipeline_parallel=2, activation_offloading=True)


def test_a_trial_says_in_one_line_what_it_needs(monkeypatch) -> None:
    """The validator refuses an offloading plan on the CPU (the rule's reason) and, on a GPU, without TRL; the
    trial's context is TRL's, and a missing TRL is one line."""
    from advisor.measure.trainable import offloading

    cpu = api.make_facts("gpt2", gpu=None, seq_len=128, global_batch_size=8)
    with pytest.raises(UsageError, match="in RAM already"):
        api.validate(
            "gpt2",
            seq_len=128,
            global_batch_size=8,
            activation_offloading=True,
            gradient_checkpointing=True,
            steps=1,
            hardware=cpu.hardware,
        )
    monkeypatch.setitem(__import__("sys").modules, "trl", None)  # as if TRL were not installed
    plan = _estimate(gradient_checkpointing=True, activation_offloading=True).plan
    with pytest.raises(UsageError, match="pip install trl"):
        offloading(object(), plan)
    assert offloading(object(), plan.model_copy(update={"activation_offloading": False})).__enter__() is None


def test_the_emitted_notes_name_trl() -> None:
    from advisor.app.emit_model import load_notes

    rec = api.recommend(LLAMA, gpu="a100-80gb", seq_len=65536, global_batch_size=8, method="lora")
    assert rec.plan.activation_offloading
    assert any("SFTConfig(activation_offloading=True)" in line for line in load_notes(rec))
    assert "activation offloading" in rec.plan.describe()
    assert rec.memory.host_bytes >= rec.memory.activations_offloaded_bytes > 10 * GIB  # 31 block inputs of 512 MiB


@pytest.mark.cuda
@pytest.mark.skipif(
    "importlib.util.find_spec('torch') is None or not __import__('torch').cuda.is_available() "
    "or importlib.util.find_spec('trl') is None",  # a string: evaluated when run, torch not collected
    reason="needs a CUDA GPU and TRL",
)
def test_cuda_trial_offloads_the_checkpoints_it_was_priced_to() -> None:
    """On a GPU: TRL's OffloadActivations lowers the measured peak by about what advisor prices as offloaded."""
    kw = dict(seq_len=1024, global_batch_size=8, micro_batch_size=8, gradient_checkpointing=True, steps=3)
    kept, offloaded = (api.validate("gpt2", activation_offloading=on, **kw).trials[0] for on in (False, True))
    assert kept.status == offloaded.status == "ok"
    priced = api.estimate(
        "gpt2", seq_len=1024, micro_batch_size=8, gradient_checkpointing=True, activation_offloading=True
    )
    moved = offloaded_activation_bytes(priced.model, offloaded.plan, 1024)
    saved = kept.measured.peak_bytes - offloaded.measured.peak_bytes
    assert saved > 0.5 * moved
    assert abs(offloaded.error.peak_bytes) < 0.25
