"""The analytic peak within 10 % of a simulated training step, for the whole catalog.

Every catalog model × {fp32, bf16, fp16} × checkpointing {off, on} × {AdamW, Adafactor}; the
micro-batch alternates between 1 and 4 over that grid so each model is checked at both sizes
(the full grid with both sizes for every row: benchmarks/analytic_vs_simulated.py and its results).
"""

from __future__ import annotations

from itertools import product

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.analytic_vs_simulated import compare  # noqa: E402
from probes.model import catalog_ids  # noqa: E402

GRID = list(product(("fp32", "bf16", "fp16"), (False, True), ("adamw", "adafactor")))
CASES = [(m, *g, 1 if (i + j) % 2 else 4) for i, m in enumerate(catalog_ids()) for j, g in enumerate(GRID)]


@pytest.mark.parametrize("model_id, precision, ckpt, optimizer, micro", CASES,
                         ids=[f"{m}-{p}-{'ckpt' if c else 'nockpt'}-{o}-b{b}" for m, p, c, o, b in CASES])
def test_analytic_peak_within_10_percent_of_simulated(model_id, precision, ckpt, optimizer, micro) -> None:
    analytic, simulated, _ = compare(model_id, precision, ckpt, optimizer, micro)
    assert abs(analytic / simulated - 1) <= 0.10, f"analytic {analytic / 2**30:.2f} GiB vs simulated {simulated / 2**30:.2f} GiB"
