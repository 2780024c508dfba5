"""The records of `benchmarks/validate_device.py`: reading its JSON lines back and rendering their markdown.

A run appends a ``run`` header (date, command, versions, matmul rates), then per grid row a ``start`` record before
the row begins and a ``row`` record (its ``ValidationReport``) when it ends, so a row a time limit stopped shows as
begun and not finished. ``benchmarks/refit_device.py`` reads the same records.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from advisor.measure.validation import ValidationReport

GIB = 2**30


def read_records(paths: list[Path]) -> tuple[list[dict[str, Any]], list[tuple[int, ValidationReport]]]:
    """The run headers and the reports (with their grid-row index) in ``paths``' JSON lines, in order.

    Raises:
        ValueError: a line that is not a record of this script (its text names the file and line).
    """
    runs, reports = [], []
    for path in paths:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if record.get("kind") == "run":
                    runs.append({**record, "unfinished": []})
                elif record.get("kind") == "start":  # a row begun: unfinished until its report follows
                    runs[-1]["unfinished"].append(f"row {record['row']} ({record['row_text']})")
                else:
                    reports.append((record["row"], ValidationReport.model_validate(record["report"])))
                    if runs and runs[-1]["unfinished"]:
                        runs[-1]["unfinished"].pop()
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a validate_device record ({exc})") from exc
    return runs, reports


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1%}"


def _err(predicted: float, measured: float | None) -> float | None:
    return predicted / measured - 1 if measured else None


def trial_rows(report: ValidationReport) -> list[str]:
    """One markdown table row per trial of ``report``."""
    rows = []
    for t in report.trials:
        m, p = t.measured, t.predicted
        head = f"| {report.model} | {report.workload.seq_len} | {t.plan.describe()} | {t.role} | {t.status} "
        if m is None or m.step_time_s is None:
            rows.append(head + "|" * 14)
            continue
        reserved = f"{m.reserved_bytes / GIB:.3f}" if m.reserved_bytes else ""
        used = (
            f"| {p.memory.device_bytes / GIB:.3f} | {m.device_bytes / GIB:.3f} "
            f"| {_pct(_err(p.memory.device_bytes, m.device_bytes))} "
            if report.device.type == "cuda"
            else "| | | "
        )
        rows.append(
            head
            + f"| {p.memory.peak_bytes / GIB:.3f} | {m.peak_bytes / GIB:.3f} | {_pct(t.error.peak_bytes)} "
            + used
            + f"| {reserved} "
            f"| {p.speed.step_time_s:.3f} | {m.step_time_s:.3f} | {_pct(t.error.step_time_s)} "
            f"| {m.step_time_spread_s / m.step_time_s:.0%} | {m.mfu:.1%} |"
        )
    return rows


def render(runs: list[dict[str, Any]], reports: list[tuple[int, ValidationReport]]) -> str:
    """The markdown of ``runs``' headers and ``reports``' trials, with the median errors."""
    device = reports[0][1].device if reports else None
    title = f"{device.name} ({device.type})" if device else "(no trials yet)"
    trials = [t for _, r in reports for t in r.trials if t.measured is not None and t.measured.step_time_s]
    peak = [abs(t.error.peak_bytes) for t in trials if t.error and t.error.peak_bytes is not None]
    used = [
        abs(_err(t.predicted.memory.device_bytes, t.measured.device_bytes))
        for _, r in reports
        if r.device.type == "cuda"
        for t in r.trials
        if t.measured is not None and t.measured.device_bytes
    ]
    step = [abs(t.error.step_time_s) for t in trials if t.error and t.error.step_time_s is not None]
    lines = [f"# advisor validate: measured against predicted on {title}", ""]
    for run in runs:
        rates = run.get("matmul_gflops") or {}
        packages = ", ".join(f"{k} {v}" for k, v in sorted(run.get("packages", {}).items()))
        lines += [
            f"- {run['date']}: `{run['command']}`; torch {run['torch']}"
            f"{', CUDA ' + run['cuda'] if run.get('cuda') else ''}, transformers {run['transformers']}"
            f"{', ' + packages if packages else ''}; Python {run['python']}, {run['cpu_count']} CPU cores; "
            f"{run['steps']} timed steps per trial after the warm-up"
            + (
                "; matmul (1024 × 768) @ (768 × 3072): " + ", ".join(f"{k} {v:,.0f} GFLOP/s" for k, v in rates.items())
                if rates
                else ""
            )
            + "."
            + "".join(f" Began {u} and did not finish within the call." for u in run.get("unfinished", []))
        ]
    lines += [
        "",
        "Peak: live tensors (CUDA: `max_memory_allocated`; CPU: one warm-up step counted as the simulator counts). "
        "Used (CUDA only): NVML's figure for the process, the CUDA context included, against advisor's "
        "`device_bytes` (a process's peak RSS on the CPU only grows from row to row, so it is not compared). "
        "Reserved: `max_memory_reserved`. Errors are predicted / measured − 1. "
        "Spread: (p90 − p10) / median of the step times.",
        "",
        "| model | seq-len | plan | trial | status | predicted peak GiB | measured GiB | error | predicted used GiB "
        "| measured used GiB | error | reserved GiB | predicted step s | measured s | error | spread | MFU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(row for _, r in reports for row in trial_rows(r)),
        "",
    ]
    for label, errors in (("Peak", peak), ("Used", used), ("Step time", step)):
        if errors:
            lines.append(
                f"{label}: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%} over "
                f"{len(errors)} trials."
            )
    for _, r in reports:
        if r.comparison and r.comparison.speedup:
            lines.append(
                f"- {r.model} --compare: {r.comparison.speedup:.2f}x the baseline's speed, "
                f"{r.comparison.memory_saved_bytes / GIB:.2f} GiB less peak memory; verdict {r.verdict}."
            )
    return "\n".join(lines) + "\n"
