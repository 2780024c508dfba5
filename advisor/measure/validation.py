"""The validator: short trial steps of a plan on this machine confirm or correct it.

``validate()`` takes the recommendation (or a given plan), runs it for a few warm-up and timed
steps (:mod:`advisor.measure.trial`), and puts the measurements beside the predictions. It corrects what
the trial disproves, within a bounded number of trials:

- out of memory: a smaller micro-batch with more accumulation (the same global batch), then
  activation checkpointing at micro-batch 1;
- a non-finite loss under fp16: bf16 where the GPU has it (NVIDIA "Train With Mixed Precision",
  https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html; HF
  "Efficient Training on a Single GPU", bf16), else the report says so;
- an error under ``torch.compile``: the same plan without it;
- room left for the next larger micro-batch (measured memory scaled by the model's prediction):
  try it, keep it if it is faster (HF performance guide: the largest batch that fits).

With ``compare``, the documents' baseline (fp32, no checkpointing, AdamW, the same global
batch: the first rows of the seeds' tables) also runs, and the report gives the speed-up and
the memory saved. The ``ValidationReport`` is the JSON of ``advisor validate --json``.

This module imports torch only inside :func:`validate` (through :mod:`advisor.measure.trial`).
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.engine import planner
from advisor.engine.planner import divisors
from advisor.engine.memory import GIB, MemoryEstimate, device_bytes
from advisor.engine.recommendation import SCHEMA_VERSION
from advisor.engine.speed import SpeedEstimate
from advisor.measure.outcome import TrialStatus
from probes.errors import UsageError
from rules import Facts, Plan, Workload

TrialRole = Literal["plan", "smaller-micro-batch", "checkpointing", "bf16", "no-compile", "larger-micro-batch",
                    "baseline"]
Verdict = Literal["confirmed", "corrected", "failed", "incomplete"]

DEFAULT_STEPS = 10
DEFAULT_WARMUP = 2
DEFAULT_MAX_TRIALS = 6  #: plan + up to 3 corrections + a larger micro-batch + the baseline's first try
SPREAD_WARNING = 0.10  #: warn when the step times' spread is over 10 % of the median
KEEP_LARGER_IF_FASTER = 0.02  #: a larger micro-batch must be 2 % faster to replace a confirmed one


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

    peak_bytes: int = Field(description="most bytes held by live tensors: torch.cuda.max_memory_allocated() on "
                                        "CUDA; on the CPU, counted over one untimed step as the simulator counts")
    device_bytes: int = Field(description="memory in use: NVML's figure for this process on CUDA (else "
                                          "max_memory_reserved); the process's peak RSS on the CPU, bytes")
    reserved_bytes: int | None = Field(None, description="torch.cuda.max_memory_reserved(), bytes (CUDA only)")
    step_time_s: float | None = Field(None, description="median seconds per optimizer step over the timed steps")
    step_time_spread_s: float | None = Field(
        None, description="spread of the timed step times: 90th minus 10th percentile, seconds")
    samples_per_s: float | None = Field(None, description="global batch / median step time")
    tokens_per_s: float | None = Field(None, description="samples/s × sequence length")
    mfu: float | None = Field(None, description="model FLOP/s (6·N·T + attention, no recomputation) / the "
                                                "device's peak FLOP/s at the plan's precision")
    losses: list[float] = Field(description="loss of every finished step, warm-up included")
    losses_finite: bool = Field(description="every loss is finite")
    timed_steps: int = Field(description="timed steps finished")
    warmup_s: float = Field(description="seconds of the warm-up steps (compilation, allocator warm-up)")
    ranks: list[RankMeasured] | None = Field(None, description="distributed trials: every rank's figures "
                                                               "(peak_bytes above is the largest)")
    sync_share: float | None = Field(None, description="distributed trials: the gradient synchronisation's "
                                                       "share of a micro-batch's forward + backward (0..1)")


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

    role: TrialRole = Field(description="'plan' (the plan under test), a correction, 'larger-micro-batch', "
                                        "or 'baseline' (--compare)")
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

    type: Literal["cuda", "cpu"]
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
    verdict: Verdict = Field(description="confirmed: the plan ran as predicted to fit; corrected: a changed plan "
                                         "is better or the only one that ran; failed: no trial ran; incomplete: "
                                         "stopped (Ctrl-C) before a plan was confirmed")
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


def _step_stats(times: list[float]) -> tuple[float | None, float | None]:
    if not times:
        return None, None
    median = statistics.median(times)
    if len(times) < 3:
        return median, max(times) - min(times)
    deciles = statistics.quantiles(times, n=10, method="inclusive")
    return median, deciles[-1] - deciles[0]


def _measured(outcome, plan: Plan, seq_len: int, speed: SpeedEstimate) -> Measured:
    median, spread = _step_stats(outcome.step_times_s)
    samples = tokens = mfu = None
    if median:
        samples = plan.global_batch_size / median
        tokens = samples * seq_len
        mfu = speed.flops_per_step / median / (speed.peak_flops_per_s * plan.data_parallel_size)
    ranks = [RankMeasured(rank=r.rank, status=r.status, peak_bytes=r.peak_bytes, device_bytes=r.device_bytes,
                          step_time_s=_step_stats(r.step_times_s)[0])
             for r in outcome.ranks] or None
    return Measured(peak_bytes=outcome.peak_bytes, device_bytes=outcome.device_bytes,
                    reserved_bytes=outcome.reserved_bytes, step_time_s=median, step_time_spread_s=spread,
                    samples_per_s=samples, tokens_per_s=tokens, mfu=mfu, losses=outcome.losses,
                    losses_finite=all(math.isfinite(v) for v in outcome.losses),
                    timed_steps=len(outcome.step_times_s), warmup_s=outcome.warmup_s, ranks=ranks,
                    sync_share=outcome.sync_share)


def smaller_micro_batch(plan: Plan) -> Plan | None:
    """Half the micro-batch (the largest divisor of the per-device batch at or below half), with the
    accumulation raised to keep the global batch; None at micro-batch 1."""
    per_device = plan.micro_batch_size * plan.gradient_accumulation_steps
    lower = [d for d in divisors(per_device) if d <= plan.micro_batch_size // 2]
    if not lower:
        return None
    mb = lower[-1]
    return plan.model_copy(update={"micro_batch_size": mb, "gradient_accumulation_steps": per_device // mb})


def larger_micro_batch(plan: Plan) -> Plan | None:
    """At least double the micro-batch (the smallest divisor of the per-device batch at or above
    twice it), with fewer accumulation steps; None without accumulation."""
    per_device = plan.micro_batch_size * plan.gradient_accumulation_steps
    higher = [d for d in divisors(per_device) if d >= 2 * plan.micro_batch_size]
    if not higher:
        return None
    mb = higher[0]
    return plan.model_copy(update={"micro_batch_size": mb, "gradient_accumulation_steps": per_device // mb})


def baseline_plan(plan: Plan) -> Plan:
    """The documents' baseline for ``plan``: fp32 without TF32, no checkpointing, AdamW, the same
    micro-batch and global batch (HF "Efficient Training on a Single GPU": the vanilla row)."""
    return plan.model_copy(update={"precision": "fp32", "tf32": False, "gradient_checkpointing": False,
                                   "optimizer": "adamw"})


def without_missing_packages(facts: Facts, plan: Plan) -> tuple[Plan, str] | None:
    """The nearest plan without bitsandbytes when ``plan`` needs it and it is missing, with a one-line
    note; None when nothing is missing. The nearest: the same plan with AdamW or Adafactor (with or
    without checkpointing), the fitting one ranked first by the planner's order."""
    if plan.optimizer != "adamw-8bit" or importlib.util.find_spec("bitsandbytes") is not None:
        return None
    options = [plan.model_copy(update={"optimizer": opt, "gradient_checkpointing": ckpt})
               for opt in ("adamw", "adafactor") for ckpt in dict.fromkeys((plan.gradient_checkpointing, True))]
    candidates = sorted((planner.evaluate(facts, p) for p in options), key=planner.Candidate.key)
    fitting = [c for c in candidates if c.fits]
    chosen = (fitting or candidates)[0].plan
    note = (f"8-bit Adam needs bitsandbytes, which is not installed (pip install bitsandbytes); validating the "
            f"nearest plan without it: {chosen.optimizer}"
            f"{', activation checkpointing' if chosen.gradient_checkpointing and not plan.gradient_checkpointing else ''}")
    return chosen, note


def describe(plan: Plan) -> str:
    """A plan in one short line (for progress and tables)."""
    parts = [plan.precision + (" + tf32" if plan.tf32 else ""), plan.optimizer,
             f"micro-batch {plan.micro_batch_size} × {plan.gradient_accumulation_steps}"]
    if plan.gradient_checkpointing:
        parts.append("checkpointing")
    if plan.data_parallel_size > 1:
        parts.append(f"{plan.parallelism} × {plan.data_parallel_size} {'GPUs' if plan.num_gpus else 'processes'}")
    return ", ".join(parts)


class _Session:
    """One validation: the facts, the trials so far, and the budget."""

    def __init__(self, facts: Facts, runtime: RuntimeSettings, steps: int, warmup: int, max_trials: int,
                 memory_limit_bytes: int | None, progress: ProgressHook | None, stop: threading.Event,
                 config: dict | None) -> None:
        self.facts, self.runtime, self.steps, self.warmup = facts, runtime, steps, warmup
        self.max_trials, self.limit, self.progress, self.stop, self.config = (max_trials, memory_limit_bytes,
                                                                              progress, stop, config)
        self.trials: list[Trial] = []
        self.warnings: list[str] = []

    @property
    def budget_left(self) -> bool:
        return len(self.trials) < self.max_trials and not self.stop.is_set()

    def run(self, role: TrialRole, reason: str, plan: Plan, runtime: RuntimeSettings | None = None) -> Trial:
        from advisor.measure.trial import run_trial

        runtime = runtime or self.runtime
        seq_len = self.facts.workload.seq_len
        candidate = planner.evaluate(self.facts, plan)
        if self.progress:
            self.progress(TrialStarted(index=len(self.trials) + 1, role=role, plan=plan,
                                       total_steps=self.steps + self.warmup,
                                       predicted_step_time_s=candidate.speed.step_time_s))
        kwargs = dict(steps=self.steps, warmup=self.warmup, torch_compile=runtime.torch_compile,
                      dataloader_num_workers=runtime.dataloader_num_workers,
                      dataloader_pin_memory=runtime.dataloader_pin_memory, memory_limit_bytes=self.limit,
                      on_step=self.progress, stop=self.stop, config=self.config)
        if plan.data_parallel_size > 1:
            from advisor.measure.trial import run_distributed_trial

            outcome = run_distributed_trial(self.facts.model, plan, seq_len, nproc=plan.data_parallel_size,
                                            kind=plan.parallelism, **kwargs)
        else:
            outcome = run_trial(self.facts.model, plan, seq_len, **kwargs)
        measured = None
        error = None
        if outcome.losses or outcome.peak_bytes:
            measured = _measured(outcome, plan, seq_len, candidate.speed)
            error = PredictionError(
                peak_bytes=candidate.memory.peak_bytes / measured.peak_bytes - 1 if measured.peak_bytes else None,
                step_time_s=candidate.speed.step_time_s / measured.step_time_s - 1 if measured.step_time_s else None)
        trial = Trial(role=role, reason=reason, plan=plan, runtime=runtime, status=outcome.status,
                      message=outcome.message, measured=measured,
                      predicted=Predicted(memory=candidate.memory, speed=candidate.speed), error=error,
                      wall_s=outcome.wall_s)
        self.trials.append(trial)
        if self.progress:
            self.progress(trial)
        return trial

    def usable_bytes(self, trial: Trial) -> int:
        usable = trial.predicted.memory.usable_bytes
        return min(usable, self.limit) if self.limit else usable

    def confirm(self, plan: Plan, role: TrialRole = "plan", reason: str = "the plan under test",
                runtime: RuntimeSettings | None = None) -> Trial | None:
        """Run ``plan``, correcting it until a trial runs cleanly; the clean trial, or None."""
        trial = self.run(role, reason, plan, runtime)
        while trial.status != "ok" and self.budget_left:
            nxt = self._correction(trial)
            if nxt is None:
                break
            trial = self.run(*nxt)
        return trial if trial.status == "ok" else None

    def _correction(self, trial: Trial) -> tuple[TrialRole, str, Plan, RuntimeSettings] | None:
        plan, runtime = trial.plan, trial.runtime
        keep = "baseline" if trial.role == "baseline" else None
        if trial.status == "oom":
            smaller = smaller_micro_batch(plan)
            if smaller is not None:
                return (keep or "smaller-micro-batch",
                        f"out of memory at micro-batch {plan.micro_batch_size}: micro-batch "
                        f"{smaller.micro_batch_size} × {smaller.gradient_accumulation_steps} keeps the global batch",
                        smaller, runtime)
            if not plan.gradient_checkpointing and trial.role != "baseline":
                return ("checkpointing", "out of memory at micro-batch 1: activation checkpointing",
                        plan.model_copy(update={"gradient_checkpointing": True}), runtime)
            return None
        if trial.status == "nonfinite":
            gpu = self.facts.gpu
            if plan.precision == "fp16" and gpu is not None and gpu.bf16:
                return (keep or "bf16", "non-finite loss under fp16: bf16 has fp32's range and needs no loss "
                                        "scaling", plan.model_copy(update={"precision": "bf16"}), runtime)
            if plan.precision == "fp16":
                self.warnings.append("non-finite loss under fp16 and this GPU has no bf16: check the loss scaling "
                                     "and the learning rate, or train in fp32")
            return None
        if trial.status == "error" and runtime.torch_compile:
            return (keep or "no-compile", f"torch.compile failed ({trial.message}): the same plan without it", plan,
                    runtime.model_copy(update={"torch_compile": False}))
        return None

    def try_larger(self, confirmed: Trial) -> Trial:
        """Try the next larger micro-batch when the measured memory leaves room; keep it if faster."""
        larger = larger_micro_batch(confirmed.plan)
        if larger is None or not self.budget_left or confirmed.measured is None:
            return confirmed
        same = ("precision", "optimizer", "gradient_checkpointing")
        if any(t.status == "oom" and t.plan.micro_batch_size <= larger.micro_batch_size
               and all(getattr(t.plan, k) == getattr(larger, k) for k in same) for t in self.trials):
            return confirmed  # already ran out of memory there
        predicted = planner.evaluate(self.facts, larger).memory
        scale = confirmed.measured.peak_bytes / max(confirmed.predicted.memory.peak_bytes, 1)
        projected_peak = int(predicted.peak_bytes * scale)
        room = (projected_peak <= self.limit if self.limit else
                device_bytes(projected_peak, larger) <= self.usable_bytes(confirmed))
        if not room:
            return confirmed
        trial = self.run("larger-micro-batch",
                         f"the measured memory leaves room for micro-batch {larger.micro_batch_size} (projected "
                         f"{projected_peak / GIB:.2f} GiB)", larger, confirmed.runtime)
        if (trial.status == "ok" and trial.measured and trial.measured.tokens_per_s and confirmed.measured.tokens_per_s
                and trial.measured.tokens_per_s > confirmed.measured.tokens_per_s * (1 + KEEP_LARGER_IF_FASTER)):
            return trial
        return confirmed


def _device(facts: Facts, limit: int | None) -> TrialDevice:
    import torch

    gpu = facts.gpu
    host = facts.hardware.host
    if gpu is not None:
        return TrialDevice(type="cuda", name=gpu.name, capacity_bytes=gpu.memory_total_bytes,
                           memory_limit_bytes=limit, torch_version=torch.__version__,
                           cuda_version=torch.version.cuda)
    return TrialDevice(type="cpu", name=(host.cpu_model if host and host.cpu_model else "CPU"),
                       capacity_bytes=host.ram_bytes if host else 0, memory_limit_bytes=limit,
                       torch_version=torch.__version__)


def runtime_settings(facts: Facts, plan: Plan) -> RuntimeSettings:
    """The rules' values of the runtime settings for ``plan`` (torch.compile, DataLoader workers, pinning)."""
    values: dict[str, Any] = {}
    for effect in planner.propose_effects(facts) + planner.check_effects(facts, plan):
        if effect.kind == "set" and effect.setting in RuntimeSettings.model_fields:
            values[effect.setting] = effect.value
    return RuntimeSettings(**values)


def validate(facts: Facts, plan: Plan, *, runtime: RuntimeSettings | None = None, steps: int = DEFAULT_STEPS,
             warmup: int = DEFAULT_WARMUP, compare: bool = False, memory_limit_bytes: int | None = None,
             max_trials: int = DEFAULT_MAX_TRIALS, progress: ProgressHook | None = None,
             stop: threading.Event | None = None, config: dict | None = None) -> ValidationReport:
    """Run ``plan`` for ``warmup + steps`` steps on this machine, correct it if the trial disproves it,
    and report measured beside predicted.

    Args:
        facts: this machine's hardware, the model and the workload (``advisor.app.api.make_facts``).
        plan: a one-device plan for this machine's device.
        runtime: torch.compile and DataLoader settings (default: the rules' values).
        steps: timed steps per trial (>= 1); warmup: untimed steps before them (>= 1).
        compare: also run the baseline (fp32, no checkpointing, AdamW, the same global batch).
        memory_limit_bytes: hold the trials to less memory than the device has.
        max_trials: bound on the trials (the baseline's first try is always allowed).
        progress: receives TrialStarted, StepUpdate and finished Trial events.
        stop: set it (e.g. on Ctrl-C) to end at the next step boundary with a partial report.
    Raises:
        UsageError: a plan for another device, several GPUs, or steps / warm-up < 1.
    """
    if steps < 1 or warmup < 1:
        raise UsageError(f"--steps and --warmup must be >= 1, got {steps} and {warmup}")
    if plan.model_parallel_size > 1:
        raise UsageError("trials of tensor / pipeline parallel plans are not supported (they need Megatron-LM, "
                         "DeepSpeed's pipeline engine or torch.distributed pipelining): validate a data-parallel plan")
    if plan.data_parallel_size > 1:
        from advisor.measure.dist_worker import KINDS

        if plan.parallelism not in KINDS or plan.offload != "none":
            raise UsageError(f"distributed trials run {', '.join(KINDS)} (DDP, or FSDP as ZeRO-2/3) without offload; "
                             f"the plan uses {plan.parallelism}{' + offload' if plan.offload != 'none' else ''}")
        if facts.hardware.nodes > 1:
            raise UsageError("trials run on this node only: validate the plan for one node")
        local = max(facts.hardware.num_gpus, 0)
        if plan.device == "cuda" and plan.num_gpus > local:
            raise UsageError(f"the plan uses {plan.num_gpus} GPUs, this machine has {local}")
    elif plan.parallelism != "none":
        raise UsageError(f"--parallelism {plan.parallelism} needs several processes (GPUs, or --nproc on the CPU)")
    device = "cpu" if facts.gpu is None else "cuda"
    if plan.device != device:
        where = "no CUDA device here" if device == "cpu" else "a GPU here"
        raise UsageError(f"the plan trains on {plan.device} but there is {where}: validate it where it runs")
    started = time.perf_counter()
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    stop = stop or threading.Event()
    session = _Session(facts, runtime or runtime_settings(facts, plan), steps, warmup, max_trials,
                       memory_limit_bytes, progress, stop, config)
    swap = without_missing_packages(facts, plan)
    if swap is not None:
        plan, note = swap
        session.warnings.append(note)
    confirmed = session.confirm(plan)
    if confirmed is not None:
        confirmed = session.try_larger(confirmed)
    comparison = None
    if compare and not stop.is_set():
        base = baseline_plan(confirmed.plan if confirmed else plan)
        no_compile = session.runtime.model_copy(update={"torch_compile": False})
        if confirmed is not None and confirmed.plan == base and confirmed.runtime == no_compile:
            comparison = Comparison(baseline_plan=base, baseline_status="ok", same_as_plan=True, speedup=1.0,
                                    memory_saved_bytes=0)
        else:
            session.max_trials = len(session.trials) + 3  # the baseline's own budget: a try and two corrections
            base_trial = session.confirm(base, "baseline", "the documents' baseline: fp32, no checkpointing, AdamW",
                                         no_compile)
            last = base_trial or next(t for t in reversed(session.trials) if t.role == "baseline")
            comparison = Comparison(baseline_plan=last.plan, baseline_status=last.status)
            if base_trial is not None and confirmed is not None:
                b, c = base_trial.measured, confirmed.measured
                comparison.speedup = b.step_time_s / c.step_time_s if b.step_time_s and c.step_time_s else None
                comparison.memory_saved_bytes = b.peak_bytes - c.peak_bytes
    for trial in session.trials:
        m = trial.measured
        if trial.status == "ok" and m and m.step_time_s and m.step_time_spread_s is not None \
                and m.step_time_spread_s > SPREAD_WARNING * m.step_time_s:
            session.warnings.append(
                f"trial {session.trials.index(trial) + 1}: step times spread {m.step_time_spread_s / m.step_time_s:.0%} "
                "of the median (other load on the device, thermal throttling or too few steps): take the timing "
                "with care")
    interrupted = stop.is_set()
    if confirmed is None:
        verdict: Verdict = "incomplete" if interrupted else "failed"
    elif confirmed.plan == plan and confirmed.runtime == session.runtime and swap is None:
        verdict = "confirmed"
    else:
        verdict = "corrected"
    return ValidationReport(
        created=created, device=_device(facts, memory_limit_bytes), model=facts.model.id, task=facts.model.task,
        workload=facts.workload, steps=steps, warmup_steps=warmup, trials=session.trials, verdict=verdict,
        confirmed_plan=confirmed.plan if confirmed else None, comparison=comparison, warnings=session.warnings,
        interrupted=interrupted, wall_s=time.perf_counter() - started)
