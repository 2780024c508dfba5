"""Recommendations calibrated on this machine: the step time scaled by the robust ratio of measured to predicted
step time of the runs measured here (:mod:`advisor.measure.run_store`: ``validate`` trials and the training
callback) on the same GPU model and the same class of step (method, sharding, attention kernel).

Pure computation on the records given (the app reads the store): the median of the runs' ratios, so one odd run
does not move it, used from :data:`MIN_RUNS` runs, bounded to :data:`BOUNDS`.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from pydantic import BaseModel, Field

from advisor.core.plan import Plan
from advisor.core.vocabulary import PARALLELISM_SPECS

#: Runs of a class a correction needs.
MIN_RUNS = 3
#: The bounds of the step-time ratio applied (measured / predicted): a model off by more than 2x is not corrected
#: further by a handful of local runs.
BOUNDS = (0.5, 2.0)


class LocalCalibration(BaseModel):
    """How the runs measured on this machine corrected the speed."""

    runs: int = Field(description="the runs measured here on this GPU model and class of step that the ratio rests on")
    step_time_ratio: float = Field(
        description="the median of their measured / predicted step times, bounded to "
        "[0.5, 2]: the factor applied to step_time_s"
    )
    speed_factor: float = Field(description="1 / step_time_ratio: the factor applied to samples/s, tokens/s and MFU")
    bounded: bool = Field(description="the median lay outside [0.5, 2] and was cut to the bound")
    step_class: str = Field(description="the class of step the runs share: method/sharding/attention")
    device: str = Field(description="the GPU model (or the CPU) the runs were measured on")

    def describe(self) -> str:
        """``calibrated on 6 runs on this machine: speed ×0.91``."""
        return f"calibrated on {self.runs} runs on this machine: speed ×{self.speed_factor:.2f}" + (
            " (bounded)" if self.bounded else ""
        )


def step_class(plan: Plan | dict[str, Any]) -> str | None:
    """``method/sharding/attention`` of a plan or a stored plan's dict (sharding: the ZeRO stage's class of
    :func:`advisor.engine.bands.sharding`); None for a dict that lacks them."""
    data = plan.model_dump(mode="json") if isinstance(plan, Plan) else plan
    try:
        stage = PARALLELISM_SPECS[data["parallelism"]].stage
        method, attention = data["method"], data["attention"]
    except (KeyError, TypeError):
        return None
    return f"{method}/{'replicated' if stage == 0 else 'states' if stage < 3 else 'weights'}/{attention}"


def _number(figures: Any, key: str) -> float | None:
    value = figures.get(key) if isinstance(figures, dict) else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def run_ratio(record: dict[str, Any]) -> float | None:
    """A run's measured / predicted step time: from tokens/s where both are known (the step's tokens may differ from
    the plan's), else from the step times; None when neither is."""
    predicted, measured = record.get("predicted"), record.get("measured")
    tokens = _number(predicted, "tokens_per_s"), _number(measured, "tokens_per_s")
    if all(tokens):
        return tokens[0] / tokens[1]
    steps = _number(predicted, "step_time_s"), _number(measured, "step_time_s")
    return steps[1] / steps[0] if all(steps) else None


def same_device(a: Any, b: str) -> bool:
    """Whether two device names are one model, spelt as NVML, torch or the catalog spell it ('NVIDIA A100-SXM4-80GB',
    'NVIDIA A100 SXM4 80GB'): the same letters and digits, case aside."""

    def key(name: str) -> str:
        return "".join(c for c in name.lower() if c.isalnum())

    return isinstance(a, str) and key(a) == key(b)


def calibration(records: list[dict[str, Any]], plan: Plan, device: str) -> LocalCalibration | None:
    """The correction for ``plan`` on ``device`` (a GPU's name, or the CPU model: :func:`same_device`) from the
    store's records: None below :data:`MIN_RUNS` comparable runs."""
    wanted = step_class(plan)
    ratios = [
        r
        for r in (
            run_ratio(rec)
            for rec in records
            if isinstance(rec.get("device"), dict)
            and same_device(rec["device"].get("name"), device)
            and isinstance(rec.get("plan"), dict)
            and step_class(rec["plan"]) == wanted
        )
        if r is not None
    ]
    if wanted is None or len(ratios) < MIN_RUNS:
        return None
    median = statistics.median(ratios)
    ratio = min(max(median, BOUNDS[0]), BOUNDS[1])
    return LocalCalibration(
        runs=len(ratios),
        step_time_ratio=ratio,
        speed_factor=1 / ratio,
        bounded=ratio != median,
        step_class=wanted,
        device=device,
    )


def calibrated(speed: BaseModel, correction: LocalCalibration | None) -> BaseModel:
    """``speed`` (an :class:`advisor.engine.speed.SpeedEstimate`, not imported here: it imports this module) with the
    correction applied (step time × ratio; samples/s, tokens/s, MFU ÷ ratio), or unchanged."""
    if correction is None:
        return speed
    r = correction.step_time_ratio
    return speed.model_copy(
        update={
            "step_time_s": speed.step_time_s * r,
            "samples_per_s": speed.samples_per_s / r,
            "tokens_per_s": speed.tokens_per_s / r,
            "mfu": speed.mfu / r,
            "local_calibration": correction,
        }
    )
