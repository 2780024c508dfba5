"""Count what a mixture of experts' routing moves beyond its dense kin's priced traffic, and fit
``advisor.engine.traffic.ROUTING_BYTES`` to it.

advisor prices a MoE block's elementwise traffic with its dense kin's column (``traffic.DENSE_KIN``: Qwen3-MoE as
Qwen3, Mixtral as Mistral, Qwen2-MoE as Qwen2), which has no routing: transformers 5.24's ``grouped_mm`` experts sort
the S = tokens x k token-expert pairs, gather their hidden states, weight the experts' outputs, restore the order and
sum each token's k rows (in fp32), and the backward scatters all of it back. Here one micro-batch of each shipped MoE
config runs on fake tensors under ``benchmarks/eager_traffic.py``'s counting mode (the grouped GEMMs counted as
compute, as the speed model prices them), at 1 and 2 blocks, so the difference is one block's count; what the dense
kin's column prices for that block is subtracted, and the rest, forward and backward apart, is fitted by least squares
to ``a·S·h + b·S·f`` (h: the hidden size, f: one expert's width) over the three families. Each family is also
scored with the constants fitted without it (leave one family out). Full fine-tuning, bf16 weights, SDPA; the routing
is the same under LoRA (it moves activations, not weights).

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/count_moe_routing.py [--out FILE]; about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.app.api import estimate  # noqa: E402
from advisor.engine import traffic  # noqa: E402
from advisor.engine.gemm import expert_width  # noqa: E402
from benchmarks.eager_traffic import counted_traffic  # noqa: E402
from probes.model import load_config, profile_from_config  # noqa: E402

MODELS = ("Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen1.5-MoE-A2.7B")
#: (micro-batch, sequence length) of the counted steps
SHAPES = ((1, 512), (2, 512), (1, 1024))
RESULTS = ROOT / "benchmarks" / "results" / "moe_routing.md"


def _step(ref: str, layers: int, micro: int, seq: int):
    """(the model's profile, counted forward bytes, counted total bytes, priced forward, priced total) of one
    micro-batch of ``ref`` cut to ``layers`` blocks, the routing term left out of the price."""
    raw = dict(load_config(ref)[0])
    raw["num_hidden_layers"] = layers
    if "max_window_layers" in raw:
        raw["max_window_layers"] = layers
    model = profile_from_config(raw, ref)
    plan = estimate(
        model,
        gpu="h100-sxm",
        micro_batch_size=micro,
        seq_len=seq,
        precision="bf16",
        weights_dtype="bf16",
        method="full",
        gradient_checkpointing=False,
        optimizer="adamw",
    ).plan
    mode = counted_traffic(model, plan, seq, raw)
    column = traffic._column(model, plan)
    x = traffic.traffic_features(model, micro, seq)
    priced_forward = sum(f * v for f, v in zip(column["forward"], x))
    priced = traffic.eager_traffic_bytes(model, plan, seq) - traffic.routing_traffic_bytes(model, plan, seq)
    return model, mode.forward_traffic, mode.traffic, priced_forward, priced


def rows() -> list[dict]:
    """One row per model and shape: the features of one block (S·h, S·f) and its unpriced forward / backward bytes."""
    out = []
    for ref in MODELS:
        for micro, seq in SHAPES:
            model, f1, t1, pf1, p1 = _step(ref, 1, micro, seq)
            _, f2, t2, pf2, p2 = _step(ref, 2, micro, seq)
            k = max(model.experts_per_token, 1)
            s = micro * seq * k
            width = expert_width(model)
            forward = (f2 - f1) - (pf2 - pf1)
            backward = (t2 - t1) - (p2 - p1) - forward
            out.append(
                dict(
                    model=ref,
                    micro=micro,
                    seq=seq,
                    sh=s * model.hidden_size,
                    sf=s * width,
                    forward=forward,
                    backward=backward,
                    counted=t2 - t1,
                    priced=p2 - p1,
                )
            )
    return out


def fit(data: list[dict], phase: str) -> tuple[float, float]:
    """Least-squares (a, b) of ``phase`` bytes = a·S·h + b·S·f over ``data``, neither below 0 (a term that would go
    negative is dropped and the other refitted alone: bytes are not taken back)."""
    a = np.array([[r["sh"], r["sf"]] for r in data])
    y = np.array([r[phase] for r in data])
    (ah, bf), *_ = np.linalg.lstsq(a, y, rcond=None)
    if ah >= 0 and bf >= 0:
        return float(ah), float(bf)
    keep = 0 if bf < 0 else 1
    (alone,), *_ = np.linalg.lstsq(a[:, [keep]], y, rcond=None)
    return (float(max(alone, 0.0)), 0.0) if keep == 0 else (0.0, float(max(alone, 0.0)))


def markdown(data: list[dict]) -> str:
    fitted = {phase: fit(data, phase) for phase in ("forward", "backward")}
    lines = [
        f"# A mixture of experts' routing traffic beyond its dense kin's column ({date.today().isoformat()})",
        "",
        "`HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/count_moe_routing.py`: one block's counted elementwise bytes "
        "(fake tensors, transformers' `grouped_mm` experts, the grouped GEMMs as compute) minus what its dense kin's "
        "traffic column prices, fitted to a·S·h + b·S·f per phase (S: tokens x k; bytes per element, 16-bit).",
        "",
        "| phase | a (S·h) | b (S·f) |",
        "|---|---|---|",
        *(f"| {phase} | {a:.2f} | {b:.2f} |" for phase, (a, b) in fitted.items()),
        "",
        "| model | micro-batch x seq | counted / block | priced without routing | unpriced fwd + bwd | fitted | "
        "fitted without the family |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in data:
        rest = [d for d in data if d["model"] != r["model"]]
        both = sum(r["sh"] * a + r["sf"] * b for a, b in fitted.values())
        loo = sum(r["sh"] * a + r["sf"] * b for a, b in (fit(rest, p) for p in ("forward", "backward")))
        unpriced = r["forward"] + r["backward"]
        lines.append(
            f"| {r['model']} | {r['micro']} x {r['seq']} | {r['counted'] / 1e6:.0f} MB | {r['priced'] / 1e6:.0f} MB | "
            f"{unpriced / 1e6:.0f} MB | {both / 1e6:.0f} MB ({both / unpriced - 1:+.1%}) | "
            f"{loo / 1e6:.0f} MB ({loo / unpriced - 1:+.1%}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS), help="write the markdown here")
    args = parser.parse_args(argv)
    text = markdown(rows())
    sys.stdout.write(text)
    Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
