"""Learn from every run: check a training run against advisor's prediction while it trains.

    from advisor.integrations import AdvisorCallback            # transformers / TRL
    trainer = Trainer(..., callbacks=[AdvisorCallback("plan.json")])

    with advisor.integrations.track("plan.json") as t:          # a plain PyTorch / accelerate loop
        for batch in loader:
            ...; optimizer.step(); t.step(tokens)

Both measure the optimizer steps after a warm-up, log one line of predicted against measured, warn early, and
append a record to the local store of runs (``advisor runs``). Nothing here is imported by ``advisor recommend``;
transformers is imported only on first use of ``AdvisorCallback``.
"""

from __future__ import annotations

from typing import Any

from advisor.integrations.prediction import Prediction, load
from advisor.integrations.tracker import Tracker, track

__all__ = ["AdvisorCallback", "Prediction", "Tracker", "load", "track"]


def __getattr__(name: str) -> Any:
    """``AdvisorCallback`` on first use (it imports transformers)."""
    if name == "AdvisorCallback":
        from advisor.integrations.hf import AdvisorCallback

        return AdvisorCallback
    raise AttributeError(f"module 'advisor.integrations' has no attribute {name!r}")
