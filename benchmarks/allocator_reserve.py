"""The caching allocator's reserve, measured where a source publishes both the live-tensor peak and the device's
reading: a check of ``advisor.engine.allocator.TRANSIENT_RESERVE`` beyond the V100 table it was fitted to.

advisor prices what the device shows in use as ``states + (peak - states) × TRANSIENT_RESERVE + slack + context``,
the reserve over the transients capped at ``TRANSIENT_RESERVE_CAP_BYTES`` without sharded parameters (fitted to
this project's H100 records; :func:`advisor.engine.allocator.device_bytes`): model states are allocated once at their sizes, activations and
temporaries fragment the cached blocks. The constant was fitted to the HF guide's nine V100 rows (torch 1.x,
NVML "used" only, so the fit leans on advisor's own peak). fms-acceleration's benchmark CSV
(``benchmarks/published/hf-qlora.jsonl``, the ``hfqlora-fms-*`` cases; A100 80GB, torch 2.4.1) publishes both
``mem_peak_torch_mem_alloc_in_bytes`` (``torch.cuda.max_memory_allocated``) and ``mem_nvidia_mem_reserved``
(nvidia-smi ``memory.used`` polled every second, its peak less the first reading, MiB). With the measured peak A and
reading R, the reserve the run implies is ``(R - slack - S) / (A - S)``, S being advisor's model states for the
case's plan: independent of advisor's activation model. The first reading may or may not hold the CUDA context
(both are printed), and a one-second poll can miss the peak: the implied reserve is a lower bound.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/allocator_reserve.py [--no-write]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import published  # noqa: E402
from probes.cuda_stack import LAZY_CONTEXT_BYTES  # noqa: E402
from advisor.engine.allocator import ALLOCATOR_SLACK_BYTES, TRANSIENT_RESERVE, device_bytes  # noqa: E402
from advisor.engine.memory import persistent_bytes  # noqa: E402
from advisor.core.vocabulary import Parallelism  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "allocator_reserve.md"
#: fms-acceleration's two readings as the case records write them (``measured.memory_as_written``)
BOTH = re.compile(r"mem_peak_torch_mem_alloc_in_bytes (\d+); mem_nvidia_mem_reserved (\d+)")
MIB = 1024**2


def implied_reserve(allocated: int, reading: int, states: int, context: int = 0) -> float:
    """The transient reserve (dimensionless) a run's live-tensor peak ``allocated`` and device reading ``reading``
    imply, given ``states`` bytes of model states and ``context`` bytes of the reading that are the CUDA context:
    :func:`advisor.engine.allocator.device_bytes` solved for :data:`TRANSIENT_RESERVE`."""
    return (reading - ALLOCATOR_SLACK_BYTES - context - states) / (allocated - states)


def rows() -> list[dict]:
    """One row per published case with both readings: bytes, and the reserve each implies."""
    out = []
    for case in published.load_cases():
        both = BOTH.search(case["measured"].get("memory_as_written") or "")
        if not both:
            continue
        allocated, reading = int(both.group(1)), int(both.group(2)) * MIB
        est, _ = published.estimate_case(case, [])
        states = persistent_bytes(est.memory.components)
        out.append(
            dict(
                id=case["id"],
                sharded=Parallelism.of(est.plan.parallelism).stage > 0,
                allocated=allocated,
                reading=reading,
                states=states,
                implied=implied_reserve(allocated, reading, states),
                implied_with_context=implied_reserve(allocated, reading, states, LAZY_CONTEXT_BYTES),
                modelled=device_bytes(allocated, est.plan, 0, states),
            )
        )
    return out


def summary(table: list[dict]) -> list[str]:
    """``reserve <group>: n=N median M range LO-HI`` per group (one GPU, sharded, all)."""
    lines = []
    for label, group in (
        ("one GPU", [r for r in table if not r["sharded"]]),
        ("FSDP", [r for r in table if r["sharded"]]),
        ("all", table),
    ):
        if group:
            implied = [r["implied"] for r in group]
            lines.append(
                f"reserve {label}: n={len(group)} median {statistics.median(implied):.2f} "
                f"range {min(implied):.2f}-{max(implied):.2f} (advisor: {TRANSIENT_RESERVE})"
            )
    return lines


def markdown(table: list[dict], lines: list[str]) -> str:
    gb = 1e9
    out = [
        f"# The caching allocator's reserve, implied by published runs ({date.today().isoformat()})",
        "",
        "`HF_HUB_OFFLINE=1 python benchmarks/allocator_reserve.py` (method: the script's docstring). GB = 10^9 B; "
        "S: advisor's model states; implied: (reading - slack - S) / (allocated - S), the reading taken as "
        "excluding the CUDA context (with it: the next column); modelled / reading: advisor's `device_bytes` "
        "from the measured peak, over the reading.",
        "",
        "```",
        *lines,
        "```",
        "",
        "| case | allocated | reading | S | implied | implied (reading holds the context) | modelled / reading |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        out.append(
            f"| {r['id']} | {r['allocated'] / gb:.2f} | {r['reading'] / gb:.2f} | {r['states'] / gb:.2f} | "
            f"{r['implied']:.2f} | {r['implied_with_context']:.2f} | {r['modelled'] / r['reading']:.3f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    table = rows()
    lines = summary(table)
    print("\n".join(lines))
    if not args.no_write:
        RESULTS.write_text(markdown(table, lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
