"""bitsandbytes' paged optimizer states (advisor/engine/paged.py): in CUDA unified memory, outside the allocator's
peak; a plan that fits only without them is tight, not out of memory; LoRA's small adapter matrices are not paged."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from advisor.app.api import estimate
from advisor.app.report import memory_table
from advisor.engine.bands import Verdict
from advisor.engine.paged import PAGED_MIN_ELEMENTS, evicted_bytes, paged_share, paging_seconds
from probes.model import profile_model
from rules import Plan

GIB = 2**30
QWEN = "Qwen/Qwen2.5-3B"
LLAMA2 = "meta-llama/Llama-2-7b-hf"
FULL = dict(
    gpu="rtx-4090", method="full", weights_dtype="bf16", seq_len=512, micro_batch_size=1, gradient_checkpointing=True
)


def test_paged_states_leave_the_peak_but_not_the_device() -> None:
    """The states of every parameter of 100,000 elements or more (all but the norms) move out of the live-tensor peak
    (max_memory_allocated does not see cudaMallocManaged); the device still holds them while it has room."""
    plain, paged = (estimate(QWEN, optimizer=o, **FULL).memory for o in ("adamw-8bit", "paged-adamw-8bit"))
    states = paged.components.optimizer_states_bytes
    assert plain.paged_bytes == 0 and states == plain.components.optimizer_states_bytes
    assert 0.99 * states < paged.paged_bytes < states
    assert paged.peak_bytes == plain.peak_bytes - paged.paged_bytes
    assert paged.device_bytes == plain.device_bytes
    assert paged.verdict == plain.verdict == Verdict.FITS


def test_a_plan_that_fits_only_with_its_states_paged_out_is_tight() -> None:
    """QLoRA's point (sec. 3, "Paged Optimizers"): the step runs with the states evicted to CPU RAM. The same plan
    with bitsandbytes' unpaged 8-bit AdamW does not fit."""
    kw = {**FULL, "seq_len": 2048, "micro_batch_size": 4}
    plain, paged = (estimate(QWEN, optimizer=o, **kw).memory for o in ("adamw-8bit", "paged-adamw-8bit"))
    assert plain.verdict == Verdict.NO_FIT and not plain.fits_capacity
    assert paged.verdict == Verdict.TIGHT and paged.fits_capacity and not paged.fits
    evicted = evicted_bytes(paged.device_bytes, paged.paged_bytes, paged.capacity_bytes)
    assert 0 < evicted <= paged.paged_bytes
    assert paged.device_verdict == Verdict.TIGHT


def test_lora_pages_only_adapter_matrices_of_100k_elements() -> None:
    """Llama-2-7B (h = 4096): rank 16's lora_A / lora_B hold 65,536 elements each, under bitsandbytes' 1e5: ordinary
    tensors; rank 32's 131,072: paged."""
    model = profile_model(LLAMA2)
    assert 16 * 4096 < PAGED_MIN_ELEMENTS < 32 * 4096
    base = dict(
        device="cuda",
        precision="bf16",
        tf32=True,
        optimizer="paged-adamw",
        method="lora",
        lora_targets="q-v",
        weights_dtype="bf16",
        gradient_checkpointing=False,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        parallelism="none",
        num_gpus=1,
    )
    assert paged_share(model, Plan(**base, lora_rank=16)) == 0
    assert paged_share(model, Plan(**base, lora_rank=32)) == 1
    kw = dict(gpu="a100-80gb", method="lora", lora_targets="q-v", optimizer="paged-adamw", seq_len=512)
    assert estimate(LLAMA2, lora_rank=16, **kw).memory.paged_bytes == 0
    rank32 = estimate(LLAMA2, lora_rank=32, **kw).memory
    assert rank32.paged_bytes == rank32.components.optimizer_states_bytes > 0


@pytest.mark.parametrize(("fsdp_version", "paged"), [(1, True), (2, False)])
def test_fsdp2_runs_the_unpaged_stand_in(fsdp_version: int, paged: bool) -> None:
    """Under FSDP2 the emitted files swap bitsandbytes' optimizer for torch's AdamW (DTensor parameters), which is not
    paged; FSDP1 keeps bitsandbytes'."""
    est = estimate(
        QWEN,
        gpu="a100-80gb:4",
        method="full",
        optimizer="paged-adamw",
        parallelism="fsdp-full-shard",
        fsdp_version=fsdp_version,
        seq_len=512,
    )
    assert (est.memory.paged_bytes > 0) is paged


def test_paging_costs_two_crossings_of_the_pcie_link() -> None:
    assert paging_seconds(0, 4) == 0
    assert paging_seconds(12 * 10**9, 4) == pytest.approx(1.0)  # 24 GB/s a direction
    assert paging_seconds(12 * 10**9, 5) == pytest.approx(0.5)
    assert evicted_bytes(30 * GIB, 6 * GIB, 24 * GIB) == 6 * GIB
    assert evicted_bytes(27 * GIB, 6 * GIB, 24 * GIB) == 3 * GIB
    assert evicted_bytes(20 * GIB, 6 * GIB, 24 * GIB) == 0


def test_the_memory_table_says_where_paged_states_live() -> None:
    mem = estimate(QWEN, optimizer="paged-adamw-8bit", **{**FULL, "seq_len": 2048, "micro_batch_size": 4}).memory
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(memory_table(mem, 4))
    text = " ".join(out.getvalue().split())
    assert "of which paged" in text and "unified memory" in text and "in CPU RAM" in text and "(PCIe 4)" in text


def test_the_card_says_where_paged_states_live() -> None:
    """The plan card's ``paged`` line, on the GPU's own PCIe generation (the RTX 4090's 4)."""
    from advisor.app.api import recommend
    from advisor.app.report import plan_card

    kw = {**FULL, "seq_len": 2048, "micro_batch_size": 4}
    mem = estimate(QWEN, optimizer="paged-adamw-8bit", **kw).memory
    rec = recommend(QWEN, gpu="rtx-4090", method="full", seq_len=2048)
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(plan_card(rec.model_copy(update={"memory": mem}), 120))
    lines = [line for line in out.getvalue().splitlines() if line.startswith("paged ")]
    assert len(lines) == 1 and "unified memory" in lines[0] and "(PCIe 4)" in lines[0], out.getvalue()
