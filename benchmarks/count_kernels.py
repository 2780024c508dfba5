"""The kernels an eager training step launches per block, counted on fake tensors (issue 43: the launch floor of
``advisor/engine/overheads.py``).

Each class of step of ``benchmarks/calibrate_activations.py`` runs one micro-batch (1 row of 128 tokens) of the
family's transformers model at its real width with one and with two layers under ``benchmarks/eager_traffic.py``'s
counting mode, which counts every aten op that launches a kernel (views and metadata ops excluded; bitsandbytes' 4-bit
ops each as one). Two layers less one gives a block's kernels, forward and backward; twice one less two the step's
kernels outside the blocks. Nothing is computed (fake tensors), so this runs on the CPU in seconds.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/count_kernels.py [--family llama] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import calibrate_traffic  # noqa: E402
from benchmarks.calibrate_activations import LORA_VARIANTS, VARIANTS  # noqa: E402
from benchmarks.eager_traffic import counted_traffic  # noqa: E402


def counts(family: str, variant: tuple, layers: int) -> tuple[int, int, int]:
    """(forward kernels, backward kernels, matmul and attention kernels) of one micro-batch of ``layers`` blocks."""
    captured = {}

    def keep(*args, **kwargs):
        captured["mode"] = mode = counted_traffic(*args, **kwargs)
        return mode

    original = calibrate_traffic.counted_traffic
    calibrate_traffic.counted_traffic = keep
    try:
        calibrate_traffic._counted(family, variant, (layers, 1, 0, 1, 128))
    finally:
        calibrate_traffic.counted_traffic = original
    mode = captured["mode"]
    return mode.forward_kernels, mode.kernels - mode.forward_kernels, mode.compute_kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="llama")
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args()
    rows = [
        "| class of step | block forward | block backward | block matmuls | step outside the blocks |",
        "|---|---|---|---|---|",
    ]
    for variant in VARIANTS + [v for v in LORA_VARIANTS if len(v) == 4 or not v[4]]:
        one, two = counts(args.family, variant, 1), counts(args.family, variant, 2)
        name = " ".join(str(v) for v in variant if v)
        rows.append(
            f"| {name} | {two[0] - one[0]} | {two[1] - one[1]} | {two[2] - one[2]} | "
            f"{2 * one[0] - two[0]} + {2 * one[1] - two[1]} |"
        )
    text = f"# Kernels per block of an eager step ({args.family}, fake tensors)\n\n" + "\n".join(rows) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
