"""One validation's trials: run a plan, correct it while its trials fail, try a larger micro-batch.

:class:`Session` holds the facts, the trials so far and the trial budget; it turns each trial's
:class:`advisor.measure.outcome.TrialOutcome` into the report's :class:`Trial` (measured beside
predicted). The corrections, within the budget:

- out of memory: a smaller micro-batch with more accumulation (the same global batch), then
  activation checkpointing at micro-batch 1;
- a non-finite loss under fp16: bf16 where the GPU has it, else a warning;
- an error under ``torch.compile``: the same plan without it;
- room left for the next larger micro-batch (measured memory scaled by the model's prediction):
  try it, keep it if it is faster.

Imports torch only when a trial runs (through :mod:`advisor.measure.trial`).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from typing import Callable

from advisor.engine.candidates import evaluate
from advisor.engine.allocator import device_bytes
from advisor.engine.memory import persistent_bytes
from advisor.engine.planner import divisors
from advisor.engine.speed import SpeedEstimate
from advisor.measure.outcome import StepUpdate, TrialOutcome
from advisor.measure.report_models import (Measured, Predicted, PredictionError, ProgressHook, RankMeasured,
                                           RuntimeSettings, Trial, TrialRole, TrialStarted)
from advisor.core.units import GIB
from advisor.core.vocabulary import Precision
from rules import Facts, Plan
from advisor.core.dimensions import BATCH

KEEP_LARGER_IF_FASTER = 0.02  #: a larger micro-batch must be 2 % faster to replace a confirmed one
#: Seconds a one-process trial may take to reach its step boundary once stopped (Ctrl-C, the time budget); past
#: them its step is cut and the trial reported from the steps it finished (issue 45: answer Ctrl-C within 2 s).
CUT_AFTER_S = 1.0
#: How often the waiting thread looks at the stop event and the clock, seconds.
POLL_S = 0.1
#: The name of the thread a one-process trial runs in (:meth:`Session._watch`).
TRIAL_THREAD = "advisor-trial"


def trial_running() -> bool:
    """Whether a trial's thread still runs: a trial cut mid-step finishes that step in the background."""
    return any(t.name == TRIAL_THREAD and t.is_alive() for t in threading.enumerate())


def _step_stats(times: list[float]) -> tuple[float | None, float | None]:
    if not times:
        return None, None
    median = statistics.median(times)
    if len(times) < 3:
        return median, max(times) - min(times)
    deciles = statistics.quantiles(times, n=10, method="inclusive")
    return median, deciles[-1] - deciles[0]


def _measured(outcome: TrialOutcome, plan: Plan, seq_len: int, speed: SpeedEstimate) -> Measured:
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


def _partial(updates: list[StepUpdate], why: str) -> TrialOutcome:
    """The outcome of a trial whose step was cut (:data:`CUT_AFTER_S`): its finished steps, from their progress."""
    return TrialOutcome(status="interrupted", message=f"{why}: the step under way was cut, the trial reported from "
                                                      f"its {len(updates)} finished step(s)",
                        losses=[u.loss for u in updates], step_times_s=[u.step_time_s for u in updates if not u.warmup],
                        warmup_s=sum(u.step_time_s for u in updates if u.warmup),
                        peak_bytes=max((u.peak_bytes for u in updates), default=0))


class _StopOrDeadline:
    """What a trial reads as its stop event (``is_set``): set once the session is stopped or its time is spent."""

    def __init__(self, session: "Session") -> None:
        self.session = session

    def is_set(self) -> bool:
        """The session was stopped, or its time budget is spent."""
        return self.session.stop.is_set() or self.session.expired


class Session:
    """One validation: the facts, the trials so far, and the budget (trials, and seconds: ``max_seconds``)."""

    def __init__(self, facts: Facts, runtime: RuntimeSettings, steps: int, warmup: int, max_trials: int,
                 memory_limit_bytes: int | None, progress: ProgressHook | None, stop: threading.Event,
                 config: dict | None, max_seconds: float | None = None) -> None:
        self.facts, self.runtime, self.steps, self.warmup = facts, runtime, steps, warmup
        self.max_trials, self.limit, self.progress, self.stop, self.config = (max_trials, memory_limit_bytes,
                                                                              progress, stop, config)
        self.max_seconds = max_seconds
        self.deadline = time.monotonic() + max_seconds if max_seconds is not None else math.inf
        self.trials: list[Trial] = []
        self.warnings: list[str] = []

    @property
    def expired(self) -> bool:
        """The time budget (``max_seconds``) is spent."""
        return time.monotonic() >= self.deadline

    def baseline_may_run(self) -> bool:
        """Neither stopped nor out of time (the baseline's trials are not counted in ``max_trials``); out of time,
        with a warning that says what did not run."""
        if self.expired and not self.stop.is_set():
            self.warnings.append(f"the baseline did not run: the time budget (--max-seconds {self.max_seconds:g}) "
                                 "was spent")
        return not self.stop.is_set() and not self.expired

    @property
    def budget_left(self) -> bool:
        """Trials and seconds are left in the budget and no stop was asked for."""
        return len(self.trials) < self.max_trials and not self.stop.is_set() and not self.expired

    def steps_within_budget(self, predicted_step_s: float) -> int:
        """The timed steps of the next trial: ``steps``, or fewer (at least 1) when the speed model's prediction of
        warm-up and timed steps passes the seconds left, with a warning saying so."""
        left = self.deadline - time.monotonic()
        if predicted_step_s <= 0 or (self.warmup + self.steps) * predicted_step_s <= left:
            return self.steps
        steps = max(1, min(self.steps, int(left // predicted_step_s) - self.warmup))
        self.warnings.append(f"trial {len(self.trials) + 1}: {steps} timed step(s) instead of {self.steps}: the "
                             f"time budget (--max-seconds {self.max_seconds:g}) leaves {max(left, 0):.0f} s and a "
                             f"step is predicted at {predicted_step_s:.3g} s")
        return steps

    @property
    def _ran_out(self) -> str:
        return f"the time budget (--max-seconds {self.max_seconds:g}) ended it"

    def _watch(self, run: Callable[[_StopOrDeadline, Callable], TrialOutcome]) -> TrialOutcome:
        """Run a one-process trial (``run(stop, on_step)``) in a thread while this one watches the stop event and the
        clock: either ends the trial at its next step boundary, and a trial still in its step :data:`CUT_AFTER_S`
        later is left to finish that step in the background (then it stops) and reported from its finished steps."""
        trial_stop, updates, result, started = _StopOrDeadline(self), [], [], time.monotonic()
        cut = threading.Event()

        def on_step(update) -> None:
            if cut.is_set():  # the trial was reported without this step: its progress is over
                return
            updates.append(update)
            if self.progress:
                self.progress(update)

        def target() -> None:
            try:
                result.append(run(trial_stop, on_step))
            except BaseException as err:  # noqa: BLE001 (given back to the watching thread)
                result.append(err)

        worker = threading.Thread(target=target, name=TRIAL_THREAD, daemon=True)
        worker.start()
        stopped_at = None
        while worker.is_alive():
            worker.join(POLL_S)
            if stopped_at is None and trial_stop.is_set():  # the trial reads it too: it stops at its boundary
                stopped_at = time.monotonic()
            if stopped_at is not None and worker.is_alive() and time.monotonic() - stopped_at > CUT_AFTER_S:
                cut.set()
                partial = _partial(list(updates), "stopped (Ctrl-C, SIGTERM or SIGHUP)" if self.stop.is_set() else
                                   self._ran_out)
                partial.wall_s = time.monotonic() - started
                return partial
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]

    def run(self, role: TrialRole, reason: str, plan: Plan, runtime: RuntimeSettings | None = None) -> Trial:
        """Run ``plan`` once (on ``plan.data_parallel_size`` processes when over 1) and record the trial, with
        its prediction; a failed trial is a status, never an exception. Progress: TrialStarted, the
        steps' StepUpdate, then the finished Trial."""
        from advisor.measure.trial import run_trial

        runtime = runtime or self.runtime
        seq_len = self.facts.workload.seq_len
        candidate = evaluate(self.facts, plan)
        steps = self.steps_within_budget(candidate.speed.step_time_s)
        if self.progress:
            self.progress(TrialStarted(index=len(self.trials) + 1, role=role, plan=plan,
                                       total_steps=steps + self.warmup,
                                       predicted_step_time_s=candidate.speed.step_time_s))
        kwargs = dict(steps=steps, warmup=self.warmup, torch_compile=runtime.torch_compile,
                      dataloader_num_workers=runtime.dataloader_num_workers,
                      dataloader_pin_memory=runtime.dataloader_pin_memory, memory_limit_bytes=self.limit,
                      config=self.config)
        if plan.data_parallel_size > 1:  # torchrun's ranks agree on a step boundary: not cut
            from advisor.measure.trial import run_distributed_trial

            outcome = run_distributed_trial(self.facts.model, plan, seq_len, nproc=plan.data_parallel_size,
                                            kind=plan.parallelism, stop=_StopOrDeadline(self), on_step=self.progress,
                                            **kwargs)
        else:
            outcome = self._watch(lambda stop, on_step: run_trial(self.facts.model, plan, seq_len, stop=stop,
                                                                  on_step=on_step, **kwargs))
        if outcome.status == "interrupted" and not self.stop.is_set() and not outcome.message.startswith(self._ran_out):
            outcome.message = f"{self._ran_out} at a step boundary"
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
        """The memory the trials may use, bytes: the prediction's usable memory, or the limit when smaller."""
        usable = trial.predicted.memory.usable_bytes
        return min(usable, self.limit) if self.limit else usable

    def confirm(self, plan: Plan, role: TrialRole = "plan", reason: str = "the plan under test",
                runtime: RuntimeSettings | None = None) -> Trial | None:
        """Run ``plan``, correcting it until a trial runs cleanly; the clean trial, or None."""
        trial = self.run(role, reason, plan, runtime)
        while trial.status != "ok" and self.budget_left:
            nxt = self.correction(trial)
            if nxt is None:
                break
            trial = self.run(*nxt)
        return trial if trial.status == "ok" else None

    def correction(self, trial: Trial) -> tuple[TrialRole, str, Plan, RuntimeSettings] | None:
        """The next trial that corrects the failed ``trial`` (role, reason, plan, runtime), or None; a
        non-finite fp16 loss on a GPU without bf16 adds a warning instead."""
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
            if plan.precision == Precision.FP16 and gpu is not None and gpu.bf16:
                return (keep or "bf16", "non-finite loss under fp16: bf16 has fp32's range and needs no loss "
                                        "scaling", plan.model_copy(update={"precision": Precision.BF16.value}), runtime)
            if plan.precision == Precision.FP16:
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
        same = [k for k in larger.__dict__ if k not in BATCH]  # the same plan but its batch split
        if any(t.status == "oom" and t.plan.micro_batch_size <= larger.micro_batch_size
               and all(getattr(t.plan, k) == getattr(larger, k) for k in same) for t in self.trials):
            return confirmed  # already ran out of memory there
        predicted = evaluate(self.facts, larger).memory
        scale = confirmed.measured.peak_bytes / max(confirmed.predicted.memory.peak_bytes, 1)
        projected_peak = int(predicted.peak_bytes * scale)
        room = (projected_peak <= self.limit if self.limit else
                device_bytes(projected_peak, larger, predicted.components.cuda_context_bytes,
                             persistent_bytes(predicted.components)) <= self.usable_bytes(confirmed))
        if not room:
            return confirmed
        trial = self.run("larger-micro-batch",
                         f"the measured memory leaves room for micro-batch {larger.micro_batch_size} (projected "
                         f"{projected_peak / GIB:.2f} GiB)", larger, confirmed.runtime)
        if (trial.status == "ok" and trial.measured and trial.measured.tokens_per_s and confirmed.measured.tokens_per_s
                and trial.measured.tokens_per_s > confirmed.measured.tokens_per_s * (1 + KEEP_LARGER_IF_FASTER)):
            return trial
        return confirmed
