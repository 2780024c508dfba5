"""The models ``advisor estimate --json`` prints: the plan estimated, its memory and speed, and the simulated step."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from advisor.engine.decisions import Warning as RuleWarning
from advisor.engine.memory import MemoryEstimate
from advisor.engine.schema import SCHEMA_VERSION
from advisor.engine.speed import SpeedEstimate
from probes.model import ModelProfile
from rules import Plan, Workload


class SimulatedMemory(BaseModel):
    """A simulated training step (``--simulate``): exact live-tensor accounting on fake tensors."""

    peak_bytes: int = Field(description="peak bytes of live tensors in the simulated step (max_memory_allocated)")
    device_bytes: int = Field(
        description="peak_bytes with the allocator reserve and CUDA context, as memory.device_bytes"
    )
    peak_phase: str = Field(description="where the peak happened: forward, backward or optimizer")
    phase_peaks_bytes: dict[str, int] = Field(description="peak live bytes per phase")
    analytic_error: float = Field(description="memory.peak_bytes / peak_bytes - 1 (the analytic model's error)")
    wall_s: float = Field(description="seconds the simulation took")
    _timeline: Any = PrivateAttr(None)  # not in the JSON: thousands of events (advisor estimate --timeline draws them)

    @property
    def timeline(self):
        """Every allocation and free of the simulated steps by kind (an
        :class:`advisor.measure.timeline.MemoryTimeline`), or None; ``advisor estimate --timeline`` draws it."""
        return self._timeline


class Estimate(BaseModel):
    """What ``advisor estimate --json`` prints."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    schema_version: str = SCHEMA_VERSION
    """MAJOR.MINOR of this JSON's schema"""
    plan: Plan
    """the plan estimated"""
    memory: MemoryEstimate
    """its memory estimate per device"""
    speed: SpeedEstimate
    """its speed estimate"""
    simulated: SimulatedMemory | None = Field(None, description="present with --simulate")
    model: ModelProfile = Field(description="the model the plan trains")
    workload: Workload
    """sequence length and global batch size"""
    warnings: list[RuleWarning] = Field(
        default_factory=list,
        description="what the rules say of this plan: their "
        "warnings, and each value they would not choose here, with why",
    )
