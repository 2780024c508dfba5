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

The report's models are in :mod:`advisor.measure.report_models`, the trials and their corrections
in :mod:`advisor.measure.session`. This module imports torch only inside :func:`validate` (through
:mod:`advisor.measure.trial`).
"""

from __future__ import annotations

import importlib.util
import threading
import time
from datetime import datetime, timezone
from typing import Any

from advisor.engine import planner
from advisor.engine.candidates import Candidate, evaluate
from advisor.measure.report_models import (Comparison, ProgressHook, RuntimeSettings, Trial, TrialDevice,
                                           TrialStarted, ValidationReport, Verdict)
from advisor.measure.session import Session
from advisor.core.dimensions import Consumer, refusal
from advisor.core.errors import UsageError
from advisor.core.vocabulary import Device, Method, Offload, Optimizer, Parallelism, Precision, WeightsDtype
from advisor.measure.run_store import record_validation
from rules import Facts, Plan
from rules.stack import installed_bitsandbytes, installed_legacy_bitsandbytes

__all__ = ["DEFAULT_MAX_TRIALS", "DEFAULT_STEPS", "DEFAULT_WARMUP", "RuntimeSettings", "Trial", "TrialStarted",
           "ValidationReport", "baseline_plan", "method_unavailable", "runtime_settings", "validate",
           "without_missing_packages"]

DEFAULT_STEPS = 10
DEFAULT_WARMUP = 2
DEFAULT_MAX_TRIALS = 6  #: plan + up to 3 corrections + a larger micro-batch + the baseline's first try
#: Host RAM a CPU trial's rank takes before its model: torch, the interpreter and gloo (about 380 MiB measured on a
#: 2-core Xeon, torch 2.13; a margin over it), so that ``--nproc`` is capped by the RAM as by the cores.
RANK_RAM_BYTES = 512 * 2**20
SPREAD_WARNING = 0.10  #: warn when the step times' spread is over 10 % of the median


def baseline_plan(plan: Plan) -> Plan:
    """The documents' baseline for ``plan``: full fine-tuning in fp32 (fp32 weights, no TF32), no checkpointing,
    AdamW, the same micro-batch and global batch (HF "Efficient Training on a Single GPU": the vanilla row); a
    LoRA / QLoRA plan is compared with training the whole model that way."""
    return plan.model_copy(update={"precision": Precision.FP32.value, "tf32": False, "gradient_checkpointing": False,
                                   "optimizer": Optimizer.ADAMW.value, "method": Method.FULL.value,
                                   "weights_dtype": WeightsDtype.FP32.value})


def without_missing_packages(facts: Facts, plan: Plan) -> tuple[Plan, str] | None:
    """The nearest plan without bitsandbytes when ``plan``'s optimizer needs it (8-bit or paged AdamW) and it is
    missing, with a one-line note; None when nothing is missing. The nearest: the same plan with AdamW or
    Adafactor (with or without checkpointing), the fitting one ranked first by the planner's order."""
    spec = Optimizer.of(plan.optimizer).spec
    package = spec.package
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    options = [plan.model_copy(update={"optimizer": opt.value, "gradient_checkpointing": ckpt})
               for opt in (Optimizer.ADAMW, Optimizer.ADAFACTOR)
               for ckpt in dict.fromkeys((plan.gradient_checkpointing, True))]
    candidates = sorted((evaluate(facts, p) for p in options), key=Candidate.key)
    fitting = [c for c in candidates if c.fits]
    chosen = (fitting or candidates)[0].plan
    name = "8-bit Adam" if plan.optimizer == Optimizer.ADAMW_8BIT else spec.summary
    note = (f"{name} needs {package}, which is not installed (pip install {package}); validating the "
            f"nearest plan without it: {chosen.optimizer}"
            f"{', activation checkpointing' if chosen.gradient_checkpointing and not plan.gradient_checkpointing else ''}")
    return chosen, note


def method_unavailable(method: str) -> str | None:
    """Why a trial of ``method`` (a :class:`~advisor.core.vocabulary.Method` value) cannot run on this machine (one line),
    or None: LoRA and QLoRA need peft, QLoRA's 4-bit base bitsandbytes as well. QLoRA trials run on the CPU too:
    bitsandbytes quantizes and multiplies its 4-bit layers there (its CPU backend, "Supported platforms" of
    https://huggingface.co/docs/bitsandbytes/main/en/installation; checked with bitsandbytes 0.50.2 by
    ``tests/measure/test_validate_adapters.py``), dequantizing each weight in PyTorch where CUDA has fused kernels."""
    spec = Method.of(method).spec
    if not spec.adapters:
        return None
    for package in ("peft", spec.package):
        if package is not None and importlib.util.find_spec(package) is None:
            return f"{method} trials need the {package} package: pip install {package}"
    return None


def _device(facts: Facts, limit: int | None) -> TrialDevice:
    import torch

    gpu = facts.gpu
    host = facts.hardware.host
    if gpu is not None:
        return TrialDevice(type=Device.CUDA.value, name=gpu.name, capacity_bytes=gpu.memory_total_bytes,
                           memory_limit_bytes=limit, torch_version=torch.__version__,
                           cuda_version=torch.version.cuda)
    return TrialDevice(type=Device.CPU.value, name=(host.cpu_model if host and host.cpu_model else "CPU"),
                       capacity_bytes=host.ram_bytes if host else 0, memory_limit_bytes=limit,
                       torch_version=torch.__version__)


def runtime_settings(facts: Facts, plan: Plan) -> RuntimeSettings:
    """The rules' values of the runtime settings for ``plan`` (torch.compile, DataLoader workers, pinning)."""
    values: dict[str, Any] = {}
    for effect in planner.propose_effects(facts) + planner.check_effects(facts, plan):
        if effect.kind == "set" and effect.setting in RuntimeSettings.model_fields:
            values[effect.setting] = effect.value
    return RuntimeSettings(**values)


def _full_rows(facts: Facts) -> Facts:
    """The facts a trial is priced with: its rows are full ``seq_len`` rows of synthetic tokens, unpadded and
    unpacked (:func:`advisor.measure.trial.run_trial`), so the workload's mean sample length is dropped."""
    if facts.workload.mean_sample_len is None:
        return facts
    return facts.model_copy(update={"workload": facts.workload.model_copy(update={"mean_sample_len": None})})


def validate(facts: Facts, plan: Plan, *, runtime: RuntimeSettings | None = None, steps: int = DEFAULT_STEPS,
             warmup: int = DEFAULT_WARMUP, compare: bool = False, memory_limit_bytes: int | None = None,
             max_trials: int = DEFAULT_MAX_TRIALS, progress: ProgressHook | None = None,
             stop: threading.Event | None = None, config: dict | None = None,
             max_seconds: float | None = None) -> ValidationReport:
    """Run ``plan`` for ``warmup + steps`` steps on this machine, correct it if the trial disproves it,
    and report measured beside predicted.

    Args:
        facts: this machine's hardware, the model and the workload (``advisor.app.api.make_facts``).
        plan: a one-device plan for this machine's device.
        runtime: torch.compile and DataLoader settings (default: the rules' values).
        steps: timed steps per trial (>= 1); warmup: untimed steps before them (>= 1).
        compare: also run the baseline (fp32, no checkpointing, AdamW, the same global batch).
        memory_limit_bytes: hold the trials to less memory than the device has, bytes.
        max_trials: bound on the trials (the baseline's first try is always allowed).
        progress: receives TrialStarted, StepUpdate and finished Trial events.
        stop: set it (Ctrl-C) to end with a partial report: at the step boundary, or a one-process trial's step cut
            :data:`advisor.measure.session.CUT_AFTER_S` later (it finishes in a background thread, then stops).
        max_seconds: the trials' time budget, seconds (None: none): fewer timed steps when predicted longer, then a
            trial still running is ended as by ``stop`` (its message says so; the report is not ``interrupted``).
    Returns:
        The report (bytes, seconds): every trial, the verdict, the confirmed plan and the comparison.
    Raises:
        UsageError: a plan for another device, several GPUs, steps / warm-up < 1, or a method this machine cannot
            trial (:func:`method_unavailable`: QLoRA without bitsandbytes, LoRA or QLoRA without peft),
            activation offloading without TRL, or a setting trials do not run (model or expert parallelism,
            selective checkpointing, another framework, the optimizer step in backward, fp8, a chunked loss).
    """
    _check(facts, plan, steps, warmup)
    check_machine(facts, plan, memory_limit_bytes)
    started, created = time.perf_counter(), datetime.now(timezone.utc).isoformat(timespec="seconds")
    stop = stop or threading.Event()
    session = Session(_full_rows(facts), runtime or runtime_settings(facts, plan), steps, warmup, max_trials,
                      memory_limit_bytes, progress, stop, config, max_seconds)
    if facts.workload.mean_sample_len is not None:
        session.warnings.append(f"the trials run full {facts.workload.seq_len}-token rows of synthetic tokens, so "
                                "they are compared with predictions for full rows, not for the "
                                f"{facts.workload.mean_sample_len}-token samples of --mean-sample-len")
    swap = without_missing_packages(facts, plan)
    if swap is not None:
        plan, note = swap
        session.warnings.append(note)
    confirmed = session.confirm(plan)
    if confirmed is not None:
        confirmed = session.try_larger(confirmed)
    comparison = _compare(session, confirmed, plan) if compare and session.baseline_may_run() else None
    session.warnings.extend(_spread_warnings(session.trials))
    interrupted = stop.is_set()
    verdict: Verdict = (("incomplete" if interrupted or session.expired else "failed") if confirmed is None else
                        "confirmed" if confirmed.plan == plan and confirmed.runtime == session.runtime and swap is None
                        else "corrected")
    report = ValidationReport(
        created=created, device=_device(facts, memory_limit_bytes), model=facts.model.id, task=facts.model.task,
        workload=facts.workload, steps=steps, warmup_steps=warmup, trials=session.trials, verdict=verdict,
        confirmed_plan=confirmed.plan if confirmed else None, comparison=comparison, warnings=session.warnings,
        interrupted=interrupted, wall_s=time.perf_counter() - started)
    report.warnings.extend(filter(None, [record_validation(report, store_device(facts.hardware))]))  # the local store
    return report


def store_device(hardware) -> dict:
    """The device of a store record (:func:`advisor.measure.run_store.record`) from a hardware profile."""
    gpu = hardware.gpu
    if gpu is None:
        return {"type": Device.CPU.value, "name": hardware.host.cpu_model or Device.CPU.value, "count": 1,
                "driver": None}
    return {"type": Device.CUDA.value, "name": gpu.name, "count": hardware.num_gpus, "driver": gpu.driver_version}


def _check(facts: Facts, plan: Plan, steps: int, warmup: int) -> None:
    """Refuse what a trial on this machine cannot run (see :func:`validate`'s errors)."""
    if steps < 1 or warmup < 1:
        raise UsageError(f"--steps and --warmup must be >= 1, got {steps} and {warmup}")
    refused = refusal(Consumer.TRIAL, plan)  # what a trial cannot run, whatever the machine (the table's rows)
    if refused is not None:
        raise UsageError(refused)
    if plan.data_parallel_size > 1:
        from advisor.measure.dist_worker import KINDS, shards_dtensors

        if plan.parallelism not in KINDS or plan.offload != Offload.NONE:
            raise UsageError(f"distributed trials run {', '.join(KINDS)} (DDP, or FSDP as ZeRO-2/3) without offload; "
                             f"the plan uses {plan.parallelism}{' + offload' if plan.offload != Offload.NONE else ''}")
        stand_in = Optimizer.of(plan.optimizer).spec.dtensor_package
        if shards_dtensors(plan.parallelism) and stand_in and importlib.util.find_spec(stand_in) is None:
            raise UsageError(f"a sharded trial steps FSDP2's DTensors with {stand_in}'s 8-bit AdamW, as the emitted "
                             f"files do (bitsandbytes' fails on them: rule optimizer.bitsandbytes-fsdp2): pip install "
                             f"{stand_in}, or validate the plan with DDP or on one GPU")
        if facts.hardware.nodes > 1:
            raise UsageError("trials run on this node only: validate the plan for one node")
        if Parallelism.of(plan.parallelism).fsdp and not plan.runs_fsdp2:
            raise UsageError("distributed trials shard with FSDP2 (fully_shard): validate the plan with "
                             + ("DDP or on one GPU (QLoRA shards with FSDP1: rule method.qlora-fsdp1)"
                                if Method.of(plan.method).spec.quantized_base else "--fsdp-version 2"))
        local = max(facts.hardware.num_gpus, 0)
        if plan.device == Device.CUDA and plan.num_gpus > local:
            raise UsageError(f"the plan uses {plan.num_gpus} GPUs, this machine has {local}")
    device = Device.CPU if facts.gpu is None else Device.CUDA
    reason = method_unavailable(plan.method)
    if reason is not None:
        raise UsageError(reason)
    if Method.of(plan.method).spec.quantized_base and plan.data_parallel_size > 1:
        raise UsageError(f"distributed {plan.method} trials are not supported (FSDP needs the 4-bit weights stored "
                         "in the compute dtype): validate the plan on one GPU")
    if Method.of(plan.method).spec.quantized_base and plan.legacy_bitsandbytes != installed_legacy_bitsandbytes(facts):
        here = installed_bitsandbytes(facts) or "none"
        raise UsageError(f"the plan is priced for bitsandbytes {'< 0.43.2' if plan.legacy_bitsandbytes else '>= 0.43.2'}"
                         f" but this machine has {here}: trials run the installed one; validate the plan without "
                         f"--legacy-bitsandbytes, or install the version it was priced for")
    if plan.device != device:
        where = "no CUDA device here" if device == Device.CPU else "a GPU here"
        raise UsageError(f"the plan trains on {plan.device} but there is {where}: validate it where it runs")
    planner.require_legal(facts, plan)
    if plan.activation_offloading and importlib.util.find_spec("trl") is None:
        raise UsageError("trials offload activations with TRL's OffloadActivations (what SFTConfig("
                         "activation_offloading=True) runs): pip install trl, or validate the plan without "
                         "--activation-offloading")


def check_machine(facts: Facts, plan: Plan, memory_limit_bytes: int | None = None) -> None:
    """Refuse a plan (a ``--plan`` file's, or ``--nproc``) that asks this machine for what it does not have, before
    any process starts: GPUs on a CPU plan, more GPUs than are here, more CPU processes than cores or than the RAM
    holds (:data:`RANK_RAM_BYTES` each), a memory limit beyond the device's memory.

    Raises:
        UsageError: one line naming the plan's count and the machine's.
    """
    host, gpu = facts.hardware.host, facts.gpu
    if plan.device == Device.CPU and plan.num_gpus:
        raise UsageError(f"the plan trains on the CPU but names {plan.num_gpus} GPUs (num_gpus must be 0 there)")
    if plan.device == Device.CUDA and not 1 <= plan.num_gpus <= facts.hardware.num_gpus:
        raise UsageError(f"the plan uses {plan.num_gpus} GPUs, this machine has {facts.hardware.num_gpus}")
    processes = plan.data_parallel_size if plan.device == Device.CPU else 1
    cores = host.cpu_cores if host is not None and host.cpu_cores else 1
    if processes > cores:
        raise UsageError(f"the plan runs {processes} CPU processes and this machine has {cores} cores: validate it "
                         f"with --nproc {cores} or fewer")
    if host is not None and host.ram_bytes and processes * RANK_RAM_BYTES > host.ram_bytes:
        raise UsageError(f"{processes} CPU processes need about {processes * RANK_RAM_BYTES / 2**30:.1f} GiB of RAM "
                         f"before the model, and this machine has {host.ram_bytes / 2**30:.1f} GiB")
    capacity = gpu.memory_total_bytes if gpu is not None else (host.ram_bytes if host is not None else 0)
    if memory_limit_bytes is not None and capacity and memory_limit_bytes > capacity:
        raise UsageError(f"--memory-limit {memory_limit_bytes / 2**30:.1f} GiB is more than the "
                         f"{capacity / 2**30:.1f} GiB the device has")


def _compare(session: Session, confirmed: Trial | None, plan: Plan) -> Comparison:
    """Run the documents' baseline (corrected like any plan, within its own budget) and compare it with
    the confirmed plan: the speed-up and the memory saved."""
    base = baseline_plan(confirmed.plan if confirmed else plan)
    no_compile = session.runtime.model_copy(update={"torch_compile": False})
    if confirmed is not None and confirmed.plan == base and confirmed.runtime == no_compile:
        return Comparison(baseline_plan=base, baseline_status="ok", same_as_plan=True, speedup=1.0,
                          memory_saved_bytes=0)
    session.max_trials = len(session.trials) + 3  # the baseline's own budget: a try and two corrections
    base_trial = session.confirm(base, "baseline", "the documents' baseline: fp32, no checkpointing, AdamW",
                                 no_compile)
    last = base_trial or next(t for t in reversed(session.trials) if t.role == "baseline")
    comparison = Comparison(baseline_plan=last.plan, baseline_status=last.status)
    if base_trial is not None and confirmed is not None:
        b, c = base_trial.measured, confirmed.measured
        comparison.speedup = b.step_time_s / c.step_time_s if b.step_time_s and c.step_time_s else None
        comparison.memory_saved_bytes = b.peak_bytes - c.peak_bytes
    return comparison


def _spread_warnings(trials: list[Trial]) -> list[str]:
    """A warning for each clean trial whose step times spread over SPREAD_WARNING of their median."""
    out = []
    for index, trial in enumerate(trials, start=1):
        m = trial.measured
        if trial.status == "ok" and m and m.step_time_s and m.step_time_spread_s is not None \
                and m.step_time_spread_s > SPREAD_WARNING * m.step_time_s:
            out.append(f"trial {index}: step times spread {m.step_time_spread_s / m.step_time_s:.0%} "
                       "of the median (other load on the device, thermal throttling or too few steps): take the "
                       "timing with care")
    return out
