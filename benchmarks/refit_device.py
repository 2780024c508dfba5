"""What `benchmarks/validate_device.py`'s records say about advisor's device constants (issue 13, item 4).

Usage: python benchmarks/refit_device.py RECORDS.jsonl [...] [--out FILE]
       python benchmarks/refit_device.py --store [RUNS.jsonl] [--out FILE]

``--store`` reads the local store of measured runs instead (issue 46: ``advisor validate``'s trials and the training
callback's records, :mod:`advisor.measure.run_store`; default the user's store, or an ``advisor runs export`` file):
the same speed per stack, and the measured peak over the predicted, per device. A GPU lent for benchmarks and a
user's own runs feed one path.

Reads the ``ValidationReport`` records of one or more runs and prints, per quantity, the value the measurements
imply beside the constant advisor uses now, each a median over the trials that ran cleanly:

- **the caching allocator's reserve** on transient tensors (:data:`advisor.engine.allocator.TRANSIENT_RESERVE`,
  fitted to the seeds' V100 table): per CUDA trial ``(max_memory_reserved − ALLOCATOR_SLACK_BYTES − S) /
  (max_memory_allocated − S)``, ``S`` the predicted model states (:func:`advisor.engine.memory.persistent_bytes`),
  which the allocator holds at their exact sizes. Both readings come from one run, so this is the allocator's
  behaviour rather than advisor's error; and its cap (:data:`advisor.engine.allocator.TRANSIENT_RESERVE_CAP_BYTES`):
  ``max_memory_reserved`` less ``max_memory_allocated``, and advisor's ``device_bytes`` (its context left out)
  against ``max_memory_reserved`` for each trial;
- **the CUDA context and library workspaces** (:data:`probes.cuda_stack.LAZY_CONTEXT_BYTES`): NVML's figure
  for the process less ``max_memory_reserved``;
- **the activations per stack**: the measured peak less everything the prediction holds besides activations,
  over the predicted activations, grouped by attention kernel, loss kernel, compile, checkpointing, activation
  offloading and method
  (the factor the stack's activation coefficients are off by; shown with the activations' share of the peak, since
  a small share makes the factor noisy);
- **the speed per stack**: predicted over measured step time, grouped the same way.

It changes no constant: a developer applies what the records support, naming the records file in the constant's
docstring (the guide: say what each constant was fitted to, never fit one to one case).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probes.cuda_stack import LAZY_CONTEXT_BYTES  # noqa: E402
from advisor.engine.allocator import (
    ALLOCATOR_SLACK_BYTES,
    TRANSIENT_RESERVE,  # noqa: E402
    TRANSIENT_RESERVE_CAP_BYTES,
    device_bytes,
)
from advisor.engine.memory import persistent_bytes  # noqa: E402
from advisor.measure.report_models import Trial  # noqa: E402
from benchmarks.device_records import read_records  # noqa: E402
from rules import Plan  # noqa: E402

MIB = 2**20


def implied_reserve(
    reserved_bytes: int, allocated_bytes: int, states_bytes: int, slack_bytes: int = ALLOCATOR_SLACK_BYTES
) -> float | None:
    """The allocator's reserve on transient tensors one CUDA run implies: (reserved − slack − states) /
    (allocated − states), all bytes (:func:`advisor.engine.allocator.device_bytes` inverted); None when the peak holds
    no transient tensors beyond the states."""
    transient = allocated_bytes - min(states_bytes, allocated_bytes)
    if transient <= 0:
        return None
    return (reserved_bytes - slack_bytes - min(states_bytes, allocated_bytes)) / transient


def activation_factor(
    measured_peak_bytes: int, predicted_peak_bytes: int, predicted_activation_bytes: int
) -> float | None:
    """Measured over predicted activations, taking the prediction's other bytes (states, temporaries) as right:
    (measured peak − (predicted peak − predicted activations)) / predicted activations; None without activations."""
    if predicted_activation_bytes <= 0:
        return None
    return (measured_peak_bytes - (predicted_peak_bytes - predicted_activation_bytes)) / predicted_activation_bytes


def stack_key(trial: Trial) -> str:
    """The stack a trial ran: attention kernel, loss kernel, compile, checkpointing, activation offloading and
    method."""
    p = trial.plan
    parts = [p.attention, f"{p.loss_kernel} loss", p.method]
    if p.torch_compile:
        parts.append("compile")
    if p.gradient_checkpointing:
        parts.append(f"{p.checkpointing} checkpointing")
    if p.activation_offloading:
        parts.append("activation offloading")
    return ", ".join(parts)


def modelled_reserved(trial: Trial) -> int:
    """advisor's ``device_bytes`` for the trial's measured ``max_memory_allocated``, its CUDA context left out: what
    it says ``max_memory_reserved`` is, bytes."""
    states = persistent_bytes(trial.predicted.memory.components)
    return device_bytes(trial.measured.peak_bytes, trial.plan, 0, states)


def clean_trials(reports) -> list[Trial]:
    """The trials that ran to the end with a finite loss and a measured step time."""
    return [
        t for r in reports for t in r.trials if t.status == "ok" and t.measured is not None and t.measured.step_time_s
    ]


def _known(values) -> list[float]:
    """The values that are not None."""
    return [v for v in values if v is not None]


def _median(values: list[float]) -> str:
    return (
        f"{statistics.median(values):.3f} (n={len(values)}, range {min(values):.3f}-{max(values):.3f})"
        if values
        else "no trials"
    )


def report(reports, device_type: str) -> str:
    """The markdown of what ``reports``' clean trials imply (module docstring)."""
    trials = clean_trials(reports)
    lines = [f"# What the device records imply ({device_type}, {len(trials)} clean trials)", ""]
    if device_type == "cuda":
        reserve = _known(
            implied_reserve(
                t.measured.reserved_bytes, t.measured.peak_bytes, persistent_bytes(t.predicted.memory.components)
            )
            for t in trials
            if t.measured.reserved_bytes
        )
        context = [
            (t.measured.device_bytes - t.measured.reserved_bytes) / MIB
            for t in trials
            if t.measured.reserved_bytes and t.measured.device_bytes
        ]
        extra = [(t.measured.reserved_bytes - t.measured.peak_bytes) / MIB for t in trials if t.measured.reserved_bytes]
        errors = [
            100 * abs(modelled_reserved(t) / t.measured.reserved_bytes - 1) for t in trials if t.measured.reserved_bytes
        ]
        lines += [
            f"- allocator reserve on transient tensors: {_median(reserve)}; advisor: {TRANSIENT_RESERVE}",
            f"- reserved less allocated, MiB: {_median(extra)}; advisor's cap: "
            f"{TRANSIENT_RESERVE_CAP_BYTES / MIB:.0f} (none under FSDP / ZeRO-3)",
            f"- advisor's reserve from the measured peak against max_memory_reserved, |error| %: {_median(errors)}",
            f"- CUDA context and workspaces, MiB: {_median(context)}; advisor: {LAZY_CONTEXT_BYTES / MIB:.0f}",
            "",
        ]
    groups: dict[str, list[Trial]] = defaultdict(list)
    for t in trials:
        groups[stack_key(t)].append(t)
    lines += [
        "| stack | trials | activations / peak (predicted) | activations measured / predicted "
        "| step time predicted / measured |",
        "|---|---|---|---|---|",
    ]
    for key, ts in sorted(groups.items()):
        share = [t.predicted.memory.components.activations_bytes / t.predicted.memory.peak_bytes for t in ts]
        act = _known(
            activation_factor(
                t.measured.peak_bytes, t.predicted.memory.peak_bytes, t.predicted.memory.components.activations_bytes
            )
            for t in ts
        )
        speed = [t.predicted.speed.step_time_s / t.measured.step_time_s for t in ts]
        lines.append(f"| {key} | {len(ts)} | {statistics.median(share):.0%} | {_median(act)} | {_median(speed)} |")
    return "\n".join(lines) + "\n"


class _StoredTrial:
    """A store record as :func:`stack_key` reads a trial (its ``plan``)."""

    def __init__(self, record: dict) -> None:
        self.plan = Plan.model_validate(record["plan"])


def store_report(records: list[dict]) -> str:
    """The markdown of what the store's records imply, per device and stack: predicted over measured step time, and
    the measured peak (``max_memory_allocated``, or the callback's lower bound on the CPU) over the predicted."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        if (r.get("measured") or {}).get("step_time_s") and (r.get("predicted") or {}).get("step_time_s"):
            groups[((r.get("device") or {}).get("name") or "?", stack_key(_StoredTrial(r)))].append(r)
    lines = [
        f"# What the local store implies ({sum(map(len, groups.values()))} runs)",
        "",
        "| device | stack | runs | step time predicted / measured | peak measured / predicted |",
        "|---|---|---|---|---|",
    ]
    for (device, key), rs in sorted(groups.items()):
        speed = [r["predicted"]["step_time_s"] / r["measured"]["step_time_s"] for r in rs]
        peak = [
            r["measured"]["peak_bytes"] / r["predicted"]["peak_bytes"]
            for r in rs
            if r["measured"].get("peak_bytes") and r["predicted"].get("peak_bytes")
        ]
        lines.append(f"| {device} | {key} | {len(rs)} | {_median(speed)} | {_median(peak)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", help="validate_<device>.jsonl files")
    parser.add_argument(
        "--store",
        nargs="?",
        const="",
        metavar="RUNS.jsonl",
        help="read the local store of measured runs (or this export of it) instead",
    )
    parser.add_argument("--out", help="write the markdown here (default: stdout)")
    args = parser.parse_args(argv)
    if args.store is not None:
        from advisor.measure import run_store

        runs = run_store.read(Path(args.store) if args.store else None)
        text = store_report(runs.records)
        Path(args.out).write_text(text) if args.out else sys.stdout.write(text)
        return
    if not args.records:
        sys.exit("refit_device: give validate_<device>.jsonl files, or --store")
    try:
        _, rows = read_records([Path(p) for p in args.records])
    except (OSError, ValueError) as exc:
        sys.exit(f"refit_device: {exc}")
    reports = [r for _, r in rows]
    if not reports:
        sys.exit("refit_device: the records hold no trials")
    kind = reports[0].device.type
    text = report([r for r in reports if r.device.type == kind], kind)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
