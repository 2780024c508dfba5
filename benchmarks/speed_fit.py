"""The speed model's two fitted constants against the runs they were fitted to: the 16-bit GEMM ceiling
(:data:`advisor.engine.speed.TENSOR16_TOP`) and the bandwidth share of memory-bound work
(:data:`advisor.engine.speed.BANDWIDTH_SHARE`), over a grid, on

- the H100 trials of ``benchmarks/results/validate_h100-sxm.jsonl`` (each distinct plan once): predicted over
  measured step time;
- the published runs with tokens/s per GPU in ``benchmarks/published/*.jsonl``, mapped as ``benchmarks/published.py``
  maps them: predicted over published tokens/s per GPU, the median per source and the count within 1.25x.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed_fit.py [--top 0.75,0.8,0.85] [--share 0.7,0.8,0.9]
[--out FILE] [--verbose]; each grid point takes about 2 minutes on 2 cores, ``--verbose`` one more.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.engine import speed  # noqa: E402
from benchmarks import published  # noqa: E402
from benchmarks.device_records import read_records  # noqa: E402
from advisor.core.vocabulary import Method  # noqa: E402

RECORDS = ROOT / "benchmarks" / "results" / "validate_h100-sxm.jsonl"
#: the plan fields a trial's estimate is made with (the rest: advisor's defaults for the model and GPU)
TRIAL_FIELDS = {
    "method",
    "precision",
    "weights_dtype",
    "micro_batch_size",
    "gradient_accumulation_steps",
    "gradient_checkpointing",
    "attention",
    "loss_kernel",
    "activation_offloading",
    "optimizer",
    "torch_compile",
}


def device_trials(records: Path = RECORDS) -> list[tuple[str, int, dict, float, str]]:
    """(model, seq-len, estimate options, measured step seconds, plan description) per distinct trial plan."""
    _, reports = read_records([records])
    trials, seen = [], set()
    for _, report in reports:
        for trial in report.trials:
            plan, measured = trial.plan, trial.measured
            key = (report.model, plan.describe(), report.workload.seq_len)
            if not (measured and measured.step_time_s) or key in seen:
                continue
            seen.add(key)
            fields = TRIAL_FIELDS | ({"lora_rank", "lora_targets"} if Method.of(plan.method).spec.adapters else set())
            options = {
                **plan.model_dump(include=fields),
                "global_batch_size": plan.micro_batch_size * plan.gradient_accumulation_steps,
            }
            trials.append((report.model, report.workload.seq_len, options, measured.step_time_s, plan.describe()))
    return trials


def evaluate(trials: list, cases: list[dict]) -> tuple[list[tuple[str, float]], list[tuple[str, str, float]]]:
    """(per trial: plan, predicted / measured step time), (per published case: source, id, predicted / published
    tokens/s per GPU), at the speed model's current constants."""
    from advisor.app import api

    device = []
    for model, seq, options, measured, described in trials:
        est = api.estimate(model, gpu="h100-sxm", seq_len=seq, **options)
        device.append((f"{model}, {described}", est.speed.step_time_s / measured))
    runs = []
    for case in cases:
        try:
            est, _ = published.estimate_case(case, [])
        except published.Skip:
            continue
        rate = est.speed.tokens_per_s / est.plan.num_gpus / case["measured"]["tokens_per_s_per_gpu"]
        runs.append((case["_file"], case["id"], rate))
    return device, runs


def _line(top: float, share: float, device: list, runs: list) -> str:
    dev = [r for _, r in device]
    rates = [r for *_, r in runs]
    sources: dict[str, list[float]] = {}
    for source, _, rate in runs:
        sources.setdefault(source, []).append(rate)
    return (
        f"| {top} | {share} | {statistics.median(dev):.2f} ({min(dev):.2f}-{max(dev):.2f}) | "
        f"{statistics.median(rates):.2f} | {sum(map(published.within, rates))} of {len(rates)} | "
        + ", ".join(f"{s} {statistics.median(v):.2f} ({len(v)})" for s, v in sorted(sources.items()))
        + " |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", default=str(speed.TENSOR16_TOP), help="GEMM ceilings, comma-separated")
    parser.add_argument("--share", default=str(speed.BANDWIDTH_SHARE), help="bandwidth shares, comma-separated")
    parser.add_argument("--out", help="also write the markdown here")
    parser.add_argument("--verbose", action="store_true", help="also every trial and run at advisor's constants")
    args = parser.parse_args(argv)
    trials = device_trials()
    cases = [c for c in published.load_cases() if c["measured"].get("tokens_per_s_per_gpu")]
    lines = [
        f"# The speed model's GEMM ceiling and bandwidth share, over a grid ({date.today()})",
        "",
        f"`benchmarks/speed_fit.py {' '.join(argv if argv is not None else sys.argv[1:])}`: H100 trials of "
        f"`{RECORDS.name}` (each distinct plan once: predicted / measured step time) and the published runs with "
        "tokens/s per GPU (predicted / published). advisor uses "
        f"TENSOR16_TOP {speed.TENSOR16_TOP}, BANDWIDTH_SHARE {speed.BANDWIDTH_SHARE}.",
        "",
        "| GEMM ceiling | bandwidth share | H100 trials: median (range) | published: median | within 1.25x | "
        "per source |",
        "|---|---|---|---|---|---|",
    ]
    chosen = (speed.TENSOR16_TOP, speed.BANDWIDTH_SHARE)
    try:
        for top in map(float, args.top.split(",")):
            for share in map(float, args.share.split(",")):
                speed.TENSOR16_TOP, speed.BANDWIDTH_SHARE = top, share
                device, runs = evaluate(trials, cases)
                lines.append(_line(top, share, device, runs))
                print(lines[-1], file=sys.stderr, flush=True)
    finally:
        speed.TENSOR16_TOP, speed.BANDWIDTH_SHARE = chosen
    if args.verbose:  # every trial and run at advisor's constants
        device, runs = evaluate(trials, cases)
        lines += [
            "",
            f"At advisor's constants ({chosen[0]}, {chosen[1]}):",
            "",
            "| trial or run | predicted / measured or published |",
            "|---|---|",
        ]
        lines += [f"| {name} | {ratio:.2f} |" for name, ratio in device]
        lines += [f"| {source}: {case} | {ratio:.2f} |" for source, case, ratio in runs]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
