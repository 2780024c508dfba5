"""The validator's report: what ``advisor validate --json`` prints, and its progress events.

These models are a JSON contract with a committed schema (``advisor schema``,
``schema/advisor.schema.json``): their names, fields and descriptions are the schema; change them
only with a schema version. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.engine.memory import MemoryEstimate
from advisor.engine.schema import SCHEMA_VERSION
from advisor.engine.speed import SpeedEstimate
from advisor.measure.outcome import TrialStatus
from advisor.core.vocabulary import Device, literal
from rules import Plan, Workload

TrialRole = Literal[
    "plan", "smaller-micro-batch", "checkpointing", "bf16", "no-compile", "larger-micro-batch", "baseline"
]
Verdict = Literal["confirmed", "corrected", "failed", "incomplete"]


class RuntimeSettings(BaseModel):
    """The settings besides the plan that a trial honours (the recommendation's rule-set values)."""

    torch_compile: bool = Field(False, description="wrap the model in torch.compile")
    dataloader_num_workers: int = Field(0, description="DataLoader worker processes")
    dataloader_pin_memory: bool = Field(False, description="DataLoader pinned host memory (CUDA only)")


class RankMeasured(BaseModel):
    """One rank of a distributed trial."""

    rank: int = Field(description="the process's rank (0 .. world size − 1)")
    status: TrialStatus = Field(description="how this rank's trial ended")
    peak_bytes: int = Field(description="this rank's live-tensor peak, bytes")
    device_bytes: int = Field(description="this rank's device memory in use (NVML on CUDA, peak RSS on the CPU), bytes")
    step_time_s: float | None = Field(None, description="this rank's median seconds per optimizer step")


class Measured(BaseModel):
    """What a trial measured."""

    peak_bytes: int = Field(
        description="most bytes held by live tensors: torch.cuda.max_memory_allocated() on "
        "CUDA; on the CPU, counted over one untimed step as the simulator counts"
    )
    device_bytes: int = Field(
        description="memory in use: NVML's figure for this process on CUDA (else "
        "max_memory_reserved); the process's peak RSS on the CPU, bytes"
    )
    reserved_bytes: int | None = Field(None, description="torch.cuda.max_memory_reserved(), bytes (CUDA only)")
    step_time_s: float | None = Field(None, description="median seconds per optimizer step over the timed steps")
    step_time_spread_s: float | None = Field(
        None, description="spread of the timed step times: 90th minus 10th percentile, seconds"
    )
    samples_per_s: float | None = Field(None, description="global batch / median step time")
    tokens_per_s: float | None = Field(None, description="samples/s × sequence length")
    mfu: float | None = Field(
        None,
        description="model FLOP/s (6·N·T + attention, no recomputation) / the "
        "device's peak FLOP/s at the plan's precision",
    )
    losses: list[float] = Field(description="loss of every finished step, warm-up included")
    losses_finite: bool = Field(description="every loss is finite")
    timed_steps: int = Field(description="timed steps finished")
    warmup_s: float = Field(description="seconds of the warm-up steps (compilation, allocator warm-up)")
    ranks: list[RankMeasured] | None = Field(
        None, description="distributed trials: every rank's figures (peak_bytes above is the largest)"
    )
    sync_share: float | None = Field(
        None,
        description="distributed trials: the gradient synchronisation's "
        "share of a micro-batch's forward + backward (0..1)",
    )


class Predicted(BaseModel):
    """The analytic model's prediction for the trial's plan (as ``advisor estimate`` gives it)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    memory: MemoryEstimate
    """the memory model's estimate for the trial's plan"""
    speed: SpeedEstimate
    """the speed model's estimate for the trial's plan"""


class PredictionError(BaseModel):
    """How far the prediction was off: predicted / measured − 1 (positive: over-predicted)."""

    peak_bytes: float | None = Field(None, description="predicted peak_bytes / measured peak_bytes − 1")
    step_time_s: float | None = Field(None, description="predicted step_time_s / measured step_time_s − 1")


class Trial(BaseModel):
    """One trial: a plan, why it ran, and what happened."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    role: TrialRole = Field(
        description="'plan' (the plan under test), a correction, 'larger-micro-batch', or 'baseline' (--compare)"
    )
    reason: str = Field(description="why this trial ran")
    plan: Plan
    """the plan this trial ran"""
    runtime: RuntimeSettings
    """torch.compile and DataLoader settings it ran with"""
    status: TrialStatus = Field(description="ok, oom (out of memory), nonfinite (inf/NaN loss), error, interrupted")
    message: str = Field("", description="what went wrong, in one line")
    measured: Measured | None = None
    """what it measured (absent when it failed before a step)"""
    predicted: Predicted
    """the analytic prediction for its plan"""
    error: PredictionError | None = Field(None, description="prediction error where both figures exist")
    wall_s: float = Field(description="seconds the trial took, building the model included")


class TrialDevice(BaseModel):
    """Where the trials ran."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    type: literal(Device)  # type: ignore[valid-type]
    """cuda or cpu"""
    name: str = Field(description="GPU name, or the CPU model")
    capacity_bytes: int = Field(description="device memory (host RAM on the CPU), bytes")
    memory_limit_bytes: int | None = Field(None, description="the smaller capacity the trials were held to, bytes")
    torch_version: str
    """torch.__version__"""
    cuda_version: str | None = None
    """torch.version.cuda (CUDA only)"""


class Comparison(BaseModel):
    """The confirmed plan against the documents' baseline (fp32, no checkpointing, AdamW, same global batch)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    baseline_plan: Plan
    """the baseline plan that ran (corrected like any plan if it ran out of memory)"""
    baseline_status: TrialStatus
    """how the baseline's last trial ended"""
    same_as_plan: bool = Field(False, description="the confirmed plan is the baseline: nothing to compare")
    speedup: float | None = Field(None, description="baseline step time / confirmed plan's step time")
    memory_saved_bytes: int | None = Field(None, description="baseline peak_bytes − confirmed plan's peak_bytes")


class ValidationReport(BaseModel):
    """What ``advisor validate --json`` prints (and ``--output`` writes)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    schema_version: str = SCHEMA_VERSION
    """MAJOR.MINOR of this JSON's schema"""
    created: str = Field(description="when the validation started, ISO 8601 UTC")
    device: TrialDevice
    """where the trials ran"""
    model: str = Field(description="the model id or path")
    task: str
    """the task head trained"""
    workload: Workload
    """sequence length and global batch size"""
    steps: int = Field(description="timed steps per trial")
    warmup_steps: int = Field(description="untimed steps before them")
    trials: list[Trial]
    """every trial in order: the plan, corrections, a larger micro-batch, the baseline"""
    verdict: Verdict = Field(
        description="confirmed: the plan ran as predicted to fit; corrected: a changed plan "
        "is better or the only one that ran; failed: no trial ran; incomplete: "
        "stopped (Ctrl-C) before a plan was confirmed"
    )
    confirmed_plan: Plan | None = Field(None, description="the fastest plan that ran cleanly")
    comparison: Comparison | None = Field(None, description="present with --compare")
    warnings: list[str] = Field(default_factory=list)
    """what the user should know about the trials"""
    interrupted: bool = Field(False, description="stopped early by Ctrl-C: a partial report")
    wall_s: float = Field(0.0, description="seconds the whole validation took")


class TrialStarted(BaseModel):
    """Progress event: a trial begins."""

    index: int
    role: TrialRole
    plan: Plan
    total_steps: int
    predicted_step_time_s: float = Field(description="the speed model's seconds per optimizer step")


ProgressHook = Callable[[Any], None]  #: receives TrialStarted, trial.StepUpdate and Trial (finished) events
