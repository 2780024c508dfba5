"""The caching allocator's reserve (advisor/engine/allocator.py): proportional to small transients, capped for large
ones unless FSDP1 or ZeRO-3 gather the parameters, and what the H100 records say of it."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from advisor.engine.allocator import ALLOCATOR_SLACK_BYTES, TRANSIENT_RESERVE, TRANSIENT_RESERVE_CAP_BYTES, device_bytes
from advisor.core.vocabulary import Parallelism
from rules import Plan
from conftest import cuda_plan  # noqa: E402

GIB = 2**30
MIB = 2**20
ROOT = Path(__file__).resolve().parents[2]
H100_RECORDS = ROOT / "benchmarks" / "results" / "validate_h100-sxm.jsonl"


def _plan(**kw) -> Plan:
    return cuda_plan(**{"micro_batch_size": 4, **kw})


def test_small_transients_keep_the_proportional_reserve_of_the_v100_fit() -> None:
    states, transient, context = 10 * GIB, 4 * GIB, 500 * MIB  # 4 GiB x 0.25 = 1 GiB, under the cap
    got = device_bytes(states + transient, _plan(), context, states)
    assert got == states + int(transient * TRANSIENT_RESERVE) + ALLOCATOR_SLACK_BYTES + context


@pytest.mark.parametrize(
    "parallelism",
    [
        Parallelism.NONE,
        Parallelism.DDP,
        Parallelism.ZERO_1,
        Parallelism.ZERO_2,
        Parallelism.FSDP_SHARD_GRAD_OP,
        Parallelism.FSDP_FULL_SHARD,
    ],
)
def test_large_transients_without_record_stream_reserve_at_most_the_cap(parallelism: Parallelism) -> None:
    """Unsharded parameters, and FSDP2's (the default ``fsdp_version``), which frees its gathered buffers without
    ``recordStream``."""
    states, transient = 16 * GIB, 40 * GIB  # 40 GiB x 0.25 = 10 GiB, over the cap
    plan = _plan(parallelism=parallelism.value, num_gpus=1 if parallelism == Parallelism.NONE else 8)
    got = device_bytes(states + transient, plan, 0, states)
    assert got == states + transient + TRANSIENT_RESERVE_CAP_BYTES + ALLOCATOR_SLACK_BYTES


@pytest.mark.parametrize(
    ("parallelism", "fsdp_version"),
    [
        (Parallelism.ZERO_3, 2),
        (Parallelism.FSDP_SHARD_GRAD_OP, 1),
        (Parallelism.FSDP_FULL_SHARD, 1),
        (Parallelism.FSDP_HYBRID_SHARD, 2),
    ],
)
def test_gathers_through_record_stream_keep_the_proportional_reserve_on_any_transients(
    parallelism: Parallelism, fsdp_version: int
) -> None:
    """FSDP1 (HYBRID_SHARD included: the Trainer runs it on FSDP1) and ZeRO-3 gather parameters layer by layer on a
    side stream whose ``recordStream`` keeps freed blocks cached: fms-acceleration's FSDP1 readings reserve 1.3-2.6x
    the transients, so no cap."""
    states, transient = 16 * GIB, 40 * GIB
    plan = _plan(parallelism=parallelism.value, num_gpus=8, fsdp_version=fsdp_version)
    got = device_bytes(states + transient, plan, 0, states)
    assert got == states + int(transient * TRANSIENT_RESERVE) + ALLOCATOR_SLACK_BYTES


def test_the_cpu_shows_the_peak_itself() -> None:
    assert (
        device_bytes(5 * GIB, _plan(device="cpu", precision="fp32", tf32=False, num_gpus=0), 500 * MIB, GIB) == 5 * GIB
    )


def test_the_h100_records_are_priced_within_the_docstrings_figures() -> None:
    """The cap's docstring: advisor's reserve from each measured peak against max_memory_reserved on the first H100
    records, median |error| 1.1 %, worst 4.1 % (the flat reserve: 14.9 %, 18.4 %); over both leases' 15 trials
    1.8 % and 6.0 %."""
    from benchmarks.refit_device import clean_trials, modelled_reserved
    from benchmarks.device_records import read_records

    _, rows = read_records([H100_RECORDS])
    trials = [t for t in clean_trials([r for _, r in rows]) if t.measured.reserved_bytes]
    assert len(trials) == 15
    errors = [abs(modelled_reserved(t) / t.measured.reserved_bytes - 1) for t in trials]
    assert statistics.median(errors[:8]) <= 0.015 and max(errors[:8]) <= 0.045
    assert statistics.median(errors) <= 0.02 and max(errors) <= 0.065
    # the context those trials measured (NVML used less reserved): the figures probes.cuda_stack's docstring gives
    contexts = [(t.measured.device_bytes - t.measured.reserved_bytes) / MIB for t in trials]
    assert 740 <= min(contexts[:8]) and max(contexts[:8]) <= 765 and max(contexts) <= 835
