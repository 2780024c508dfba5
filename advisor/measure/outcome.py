"""What a trial is given and what it gives back, typed: the parent of a distributed trial and its
ranks speak JSON through these models (``spec.json``, ``rank<R>.json`` and the progress lines).

- :class:`TrialSpec`: everything one trial needs (the model, the plan, the workload's sequence
  length, the steps, the runtime settings, the memory limit, the config; the distributed kind).
- :class:`StepUpdate`: one finished optimizer step (what progress displays show).
- :class:`TrialOutcome`: what one trial measured; :class:`RankOutcome`: what one rank of a
  distributed trial reports back.
- :data:`TrialEvent`: a progress line a rank prints on stdout, a discriminated union on ``event``
  (:class:`StepEvent`, :class:`RankDoneEvent`), read back by :func:`parse_event`.

Imports no torch.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from probes.model import ModelProfile
from advisor.core.units import GIB
from rules import Plan

TrialStatus = Literal["ok", "oom", "nonfinite", "error", "interrupted"]

#: Non-finite losses are findings: they travel as JSON's NaN / Infinity constants, never as null.
_FLOATS = ConfigDict(ser_json_inf_nan="constants")


class TrialSpec(BaseModel):
    """Everything one trial needs; a distributed trial's parent writes it to ``spec.json`` for the ranks."""

    model: ModelProfile  #: the profiled model (its task head included)
    plan: Plan  #: the plan to train; ``plan.device`` picks CUDA or the CPU
    seq_len: int  #: tokens per sample
    steps: int = 10  #: timed optimizer steps
    warmup: int = 2  #: untimed optimizer steps before them
    torch_compile: bool = False  #: wrap the model in torch.compile
    dataloader_num_workers: int = 0  #: DataLoader worker processes
    dataloader_pin_memory: bool = False  #: DataLoader pinned host memory (CUDA only)
    memory_limit_bytes: int | None = None  #: hold the trial to less memory than the device has, bytes
    config: dict | None = None  #: the config.json dict (None: read again from the model's path or id)
    kind: str | None = None  #: a distributed trial's strategy (``dist_worker.KINDS``); None on one device


class StepUpdate(BaseModel):
    """Progress of one finished optimizer step (what the progress bar shows)."""

    model_config = _FLOATS

    step: int  #: 1-based, warm-up included
    total: int  #: warm-up + timed steps
    warmup: bool  #: a warm-up step (not timed)
    step_time_s: float  #: seconds of this optimizer step
    peak_bytes: int  #: peak memory so far in this trial, bytes
    loss: float  #: the step's loss (sum over the micro-batches of loss / accumulation)

    def describe(self) -> str:
        """One line for progress displays: step n/N, its time, the peak so far (when counted), the loss."""
        peak = f", peak {self.peak_bytes / GIB:.2f} GiB" if self.peak_bytes else ""
        return (
            f"{'warm-up' if self.warmup else 'step'} {self.step}/{self.total}: {self.step_time_s:.3f} s{peak}, "
            f"loss {self.loss:.3f}"
        )


class _Figures(BaseModel):
    """What a trial (or one rank of it) measured."""

    model_config = _FLOATS

    status: TrialStatus
    message: str = ""
    losses: list[float] = Field(default_factory=list)  #: every finished step's loss, warm-up included
    step_times_s: list[float] = Field(default_factory=list)  #: timed steps only, seconds
    warmup_s: float = 0.0  #: seconds of the warm-up steps (compilation, allocator warm-up)
    peak_bytes: int = 0  #: most bytes of live tensors (CUDA: max_memory_allocated; CPU: counted step), bytes
    phase_peaks: dict[str, int] = Field(default_factory=dict)  #: CPU: peak per phase of the counted step, bytes
    reserved_bytes: int | None = None  #: CUDA: max_memory_reserved, bytes
    device_bytes: int = 0  #: CUDA: NVML used by this process (else reserved + context); CPU: peak RSS, bytes
    wall_s: float = 0.0  #: seconds the whole trial took, building included
    sync_share: float | None = None  #: distributed: gradient synchronisation's share of a micro-batch


class RankOutcome(_Figures):
    """What one rank of a distributed trial reports back (its ``rank<R>.json``)."""

    rank: int  #: the process's rank (0 .. world_size - 1)
    world_size: int  #: the number of ranks


class TrialOutcome(_Figures):
    """What one trial measured (a distributed one: rank 0's losses and times, the largest peaks)."""

    ranks: list[RankOutcome] = Field(default_factory=list)  #: distributed: each rank's outcome, by rank


class StepEvent(BaseModel):
    """Progress line: rank 0 finished an optimizer step."""

    model_config = _FLOATS

    event: Literal["step"] = "step"
    update: StepUpdate


class RankDoneEvent(BaseModel):
    """Progress line: a rank finished its trial and wrote ``rank<R>.json`` (its figures are there)."""

    event: Literal["rank-done"] = "rank-done"
    rank: int
    status: TrialStatus


TrialEvent = Annotated[Union[StepEvent, RankDoneEvent], Field(discriminator="event")]
_EVENTS: TypeAdapter[StepEvent | RankDoneEvent] = TypeAdapter(TrialEvent)


def parse_event(line: str) -> StepEvent | RankDoneEvent | None:
    """The progress event one stdout line of a rank holds; None for any other line (a library's output)."""
    try:
        return _EVENTS.validate_json(line)
    except ValidationError:
        return None
