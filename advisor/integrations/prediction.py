"""What advisor predicted for a plan, read from its JSON: a ``recommend --json`` or ``estimate --json`` output file,
or a ``plan.json`` written beside the emitted configs (a folder holding one is read too). No torch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.core.errors import UsageError
from advisor.core.files import PLAN_FILE  # --emit writes it beside the configs
from advisor.core.text import shown
from probes.config_check import read_json

#: The memory band used when the JSON has none (a CPU plan, an older schema): ± 10 %.
DEFAULT_MEMORY_BAND = 0.10


@dataclass
class Prediction:
    """The figures a training run is checked against (bytes, seconds, tokens/s of all devices)."""

    plan: dict[str, Any]
    peak_bytes: int | None = None
    device_bytes: int | None = None
    memory_band: float = DEFAULT_MEMORY_BAND
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    model_id: str | None = None
    task: str | None = None
    seq_len: int | None = None
    source: str = ""
    calibration_ratio: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens of one optimizer step (predicted tokens/s × step time), or None."""
        if self.tokens_per_s and self.step_time_s:
            return self.tokens_per_s * self.step_time_s
        return None

    def figures(self) -> dict[str, Any]:
        """The predicted figures as a store record keeps them: the speed model's own, without a correction of the
        runs measured here (``calibration_ratio``: the step-time ratio the JSON's figures include), so that the
        runs' ratios are never compounded."""
        r = self.calibration_ratio
        return {
            "peak_bytes": self.peak_bytes,
            "device_bytes": self.device_bytes,
            "step_time_s": self.step_time_s / r if self.step_time_s else None,
            "tokens_per_s": self.tokens_per_s * r if self.tokens_per_s else None,
            "samples_per_s": self.samples_per_s * r if self.samples_per_s else None,
            "memory_band": self.memory_band,
            "calibration_ratio": r,
        }


def from_json(data: dict[str, Any], source: str = "") -> Prediction:
    """A :class:`Prediction` of an advisor JSON object (``plan``, ``memory``, ``speed``; ``model`` and ``workload``
    where present).

    Raises:
        UsageError: the object lacks a plan, a memory or a speed object."""
    if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) for k in ("plan", "memory", "speed")):
        raise UsageError(
            f"{source or 'the plan'}: not an advisor recommend / estimate JSON (it needs plan, memory "
            "and speed objects)"
        )
    memory = {k: _figure(v) for k, v in data["memory"].items()}
    speed = {k: _figure(v) for k, v in data["speed"].items()}
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    workload = data.get("workload") if isinstance(data.get("workload"), dict) else {}
    seq_len = _figure(workload.get("seq_len"))
    if seq_len is None and speed.get("samples_per_s") and speed.get("tokens_per_s"):
        seq_len = round(speed["tokens_per_s"] / speed["samples_per_s"])
    text = {k: v if isinstance(v, str) else None for k, v in model.items()}
    return Prediction(
        plan=data["plan"],
        peak_bytes=memory.get("peak_bytes"),
        device_bytes=memory.get("device_bytes"),
        memory_band=memory.get("band") or DEFAULT_MEMORY_BAND,
        step_time_s=speed.get("step_time_s"),
        tokens_per_s=speed.get("tokens_per_s"),
        samples_per_s=speed.get("samples_per_s"),
        model_id=text.get("id"),
        task=text.get("task"),
        seq_len=int(seq_len) if seq_len else None,
        source=source,
        calibration_ratio=_ratio(data["speed"].get("local_calibration")),
    )


def _figure(value: Any) -> Any:
    """A figure of the JSON as it is when it is a finite number >= 0, else None (unknown): NaN, infinity, a string or a
    negative count in a hand-edited plan made the summary say "nan" and the store refuse the record (issue 44)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None if not isinstance(value, dict) else value
    return value if math.isfinite(value) and value >= 0 else None


def _ratio(calibration: Any) -> float:
    """The step-time ratio of a JSON's ``speed.local_calibration`` (1: none)."""
    ratio = calibration.get("step_time_ratio") if isinstance(calibration, dict) else None
    return float(ratio) if isinstance(ratio, (int, float)) and ratio > 0 else 1.0


def load(plan: str | Path | dict[str, Any] | Prediction) -> Prediction:
    """A :class:`Prediction` from a path (a JSON file, or a folder with ``plan.json``), a dict or a Prediction.

    Raises:
        UsageError: ``plan`` is of another type, or the file cannot be read (a FIFO, a device: not waited on), is not
            JSON, or is not an advisor JSON (one line naming it)."""
    if isinstance(plan, Prediction):
        return plan
    if isinstance(plan, dict):
        return from_json(plan, "the plan")
    if not isinstance(plan, (str, os.PathLike)) or not str(plan):
        raise UsageError(
            f"the plan must be a path (an advisor JSON file or a folder with {PLAN_FILE}), a dict or a "
            f"Prediction, got {shown(repr(plan), 80)}"
        )
    path = Path(plan)
    if path.is_dir():
        path = path / PLAN_FILE
    return from_json(read_json(path, f"the plan {shown(str(path))}"), str(path))
