"""One trial: real training steps of a plan on this machine's device, measured.

The model is built from its config (random weights, or the local weights when its folder has
them; never downloaded) in the plan's weights dtype (pure bf16: ``dtype=torch.bfloat16``), wrapped in
PEFT's LoRA adapters for a LoRA / QLoRA plan (QLoRA's base loaded in 4-bit NF4 by bitsandbytes on CUDA),
fed a synthetic batch of the plan's shape through a ``DataLoader`` with
the planned workers and pinned memory, and trained for warm-up steps and then timed steps with
exactly the plan: autocast bf16 / fp16 with ``torch.amp.GradScaler`` for fp16 (PyTorch
"Automatic Mixed Precision", https://pytorch.org/docs/stable/amp.html), the TF32 flags
(https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices),
activation checkpointing, activation offloading (TRL's), gradient accumulation, the optimizer and
``torch.compile``.

Measurements: on CUDA, ``torch.cuda.max_memory_allocated()`` / ``max_memory_reserved()``, the
memory NVML shows in use by this process, and step times from CUDA events; on the CPU, the peak
resident set size (Linux ``VmHWM``, reset per trial through ``/proc/self/clear_refs``) and wall
time. Out-of-memory is caught by type (``torch.cuda.OutOfMemoryError``, never by message);
a ``memory_limit_bytes`` makes the device smaller (``torch.cuda.set_per_process_memory_fraction``
on CUDA; on the CPU the trial stops with ``oom`` when its counted live-tensor peak passes the limit).
On the CPU, one untimed step (the last warm-up step) runs under the simulator's live-bytes
counter, so ``peak_bytes`` means the same on both devices: the most bytes held by live tensors.

Imports torch and transformers (off the fast path).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.measure.outcome import RankOutcome, StepEvent, StepUpdate, TrialOutcome, TrialSpec, parse_event
from advisor.measure.trainable import (SyntheticRows, apply_adapters, autocast_dtype, build_model, build_quantized,
                                       enable_checkpointing, hf_config, local_weights_dir, make_optimizer, offloading)
from advisor.measure.trial_memory import TrialMemory, TrialOutOfMemory, count_live_tensors, mark_phase
from advisor.core.kernels import LossKernel
from probes.model import ModelProfile
from advisor.core.vocabulary import Device, Method, Precision
from rules import Plan

#: How bad a rank's ending is, worst first: the distributed trial reports its worst rank's status.
_SEVERITY: dict[str, int] = {"oom": 0, "nonfinite": 1, "error": 2, "interrupted": 3, "ok": 4}


class _Stopped(Exception):
    """The stop event was set: end at this step boundary."""


def run_trial(model: ModelProfile, plan: Plan, seq_len: int, *, steps: int = 10, warmup: int = 2,
              torch_compile: bool = False, dataloader_num_workers: int = 0, dataloader_pin_memory: bool = False,
              memory_limit_bytes: int | None = None, on_step: Callable[[StepUpdate], None] | None = None,
              stop: threading.Event | None = None, config: dict | None = None, dist=None) -> TrialOutcome:
    """Train ``warmup + steps`` optimizer steps of ``plan`` on this machine and measure them.

    Args:
        model: the profiled model (its task head included).
        plan: a one-device plan (``parallelism='none'``); ``plan.device`` picks CUDA or the CPU.
        seq_len: tokens per sample.
        steps: timed optimizer steps; warmup: untimed steps before them (at least 2 on the CPU:
            the second is the counted step, once the optimizer state exists).
        torch_compile, dataloader_num_workers, dataloader_pin_memory: the runtime settings.
        memory_limit_bytes: make the device smaller than it is (a forced out-of-memory), bytes.
        on_step: called after every optimizer step.
        stop: when set, the trial ends at the next step boundary with status ``interrupted``.
        config: the config.json dict (default: read again from the model's path or id).
        dist: this rank of a distributed trial (``advisor.measure.dist_worker.Distributed``), or None.
    Returns:
        The outcome (bytes, seconds); every failure is a status (``oom``, ``nonfinite``, ``error``,
        ``interrupted``), never an exception, and all the trial's memory is freed.
    """
    spec = TrialSpec(model=model, plan=plan, seq_len=seq_len, steps=steps, warmup=warmup, torch_compile=torch_compile,
                     dataloader_num_workers=dataloader_num_workers, dataloader_pin_memory=dataloader_pin_memory,
                     memory_limit_bytes=memory_limit_bytes, config=config)
    return run_spec(spec, on_step=on_step, stop=stop, dist=dist)


def run_spec(spec: TrialSpec, *, on_step: Callable[[StepUpdate], None] | None = None,
             stop: threading.Event | None = None, dist=None) -> TrialOutcome:
    """:func:`run_trial` of a :class:`TrialSpec` (what a distributed trial's ranks run); the same outcome."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="torch.utils.checkpoint")
    cuda = spec.plan.device == Device.CUDA
    if not cuda:
        spec = spec.model_copy(update={"warmup": max(spec.warmup, 2)})
    outcome = TrialOutcome(status="ok")
    start = time.perf_counter()
    memory = TrialMemory(torch, cuda, spec.memory_limit_bytes)
    try:
        with _tf32(torch, spec.plan):
            _train(torch, spec, memory, outcome, on_step, stop, dist)
    except (torch.cuda.OutOfMemoryError, TrialOutOfMemory) as err:
        outcome.status = "oom"
        outcome.message = f"out of memory: {str(err).splitlines()[0][:300]}"
    except (_Stopped, KeyboardInterrupt):
        outcome.status = "interrupted"
        outcome.message = "stopped at a step boundary (Ctrl-C, SIGTERM or SIGHUP)"
    except Exception as err:  # a trial that cannot run is a finding, reported with the plan
        outcome.status = "error"
        outcome.message = f"{type(err).__name__}: {_first_line(err)}"
    finally:
        try:
            memory.finish(outcome)  # the traceback's frames are gone once the except blocks have ended
        except Exception as err:  # a sticky CUDA error (an illegal memory access) fails every later CUDA call
            outcome.status = "error"
            outcome.message = "; ".join(filter(None, [
                outcome.message, f"the device could not be read afterwards ({type(err).__name__}: {_first_line(err)}): "
                "after a CUDA error such as an illegal memory access, every later CUDA call of this process fails"]))
        outcome.wall_s = time.perf_counter() - start
    return outcome


def _first_line(err: BaseException) -> str:
    """The first line of an exception's message, at most 300 characters ('' when it has none)."""
    return (str(err).strip().splitlines() or [""])[0][:300]


@contextlib.contextmanager
def _tf32(torch, plan: Plan) -> Iterator[None]:
    """On CUDA, the plan's TF32 flags for matmuls and cuDNN during the trial, restored afterwards."""
    if plan.device != Device.CUDA:
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = plan.tf32
    torch.backends.cudnn.allow_tf32 = plan.tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@dataclass
class _Loop:
    """What the training loop holds: the model, its optimizer, the batches and the precision settings."""

    net: Any
    forward: Any  #: the compiled model, or the model itself
    optimizer: Any
    batches: Any  #: an iterator over the DataLoader's micro-batches
    loader: Any
    device: Any  #: the torch.device the steps run on
    dtype: Any  #: the autocast dtype, or None (fp32)
    scaler: Any  #: the fp16 GradScaler, or None
    accumulation: int  #: micro-batches per optimizer step
    non_blocking: bool  #: copy the pinned batches asynchronously
    offload: Any  #: the activation-offloading context the forward runs in (TRL's), or a null context


def _setup(torch, spec: TrialSpec, dist) -> _Loop:
    """Build the model (wrapped for ``dist``), its optimizer and a DataLoader over enough synthetic rows."""
    plan, model = spec.plan, spec.model
    cuda = plan.device == Device.CUDA
    device = dist.device if dist is not None else torch.device(plan.device)
    torch.manual_seed(0)
    config = hf_config(model, plan, spec.config)
    if Method.of(plan.method).spec.quantized_base:  # QLoRA: bitsandbytes quantizes the base while loading it
        net = build_quantized(model, config, plan, device, weights=local_weights_dir(model))
    else:
        net = build_model(model, config, weights=local_weights_dir(model), weights_dtype=plan.weights_dtype,
                          init_device=device if cuda else None).to(device)
    net.train()
    if (liger := LossKernel.of(plan.loss_kernel).spec).fused_layers:  # as the Trainer's use_liger_kernel=True
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(model=net, **dict(liger.liger_config))
    if plan.gradient_checkpointing:
        enable_checkpointing(net)
    net = apply_adapters(net, model, plan)  # LoRA / QLoRA: PEFT's adapters over the frozen base
    if dist is not None:
        net = dist.wrap(net)
    offload = offloading(net, plan)
    optimizer = make_optimizer([p for p in net.parameters() if p.requires_grad], plan,
                               dtensors=dist is not None and dist.shards)  # FSDP2: the emitted files' optimizer
    forward = torch.compile(net) if spec.torch_compile else net
    scaler = torch.amp.GradScaler(device.type) if plan.precision == Precision.FP16 else None
    accumulation = plan.gradient_accumulation_steps
    rows = SyntheticRows(model, config, plan.micro_batch_size * accumulation * (spec.warmup + spec.steps),
                         spec.seq_len, seed=dist.rank if dist is not None else 0)  # made as the steps consume them
    loader = torch.utils.data.DataLoader(rows, batch_size=plan.micro_batch_size, shuffle=False,
                                         num_workers=spec.dataloader_num_workers,
                                         pin_memory=spec.dataloader_pin_memory and cuda, drop_last=True)
    return _Loop(net=net, forward=forward, optimizer=optimizer, batches=iter(loader), loader=loader, device=device,
                 dtype=autocast_dtype(plan.precision), scaler=scaler, accumulation=accumulation,
                 non_blocking=spec.dataloader_pin_memory, offload=offload)


def _train(torch, spec: TrialSpec, memory: TrialMemory, outcome: TrialOutcome,
           on_step: Callable[[StepUpdate], None] | None, stop: threading.Event | None, dist=None) -> None:
    """The training loop; its locals (model, optimizer, batches) die when it returns or raises.

    ``dist`` (an ``advisor.measure.dist_worker.Distributed``) makes it one rank of a data-parallel run: the
    model is wrapped (DDP or FSDP) before the optimizer is built, each rank reads its own batches,
    accumulation skips the gradient sync until the last micro-batch, and a stop is agreed by all ranks.
    """
    loop = _setup(torch, spec, dist)
    cpu = spec.plan.device != Device.CUDA
    total = spec.warmup + spec.steps
    counted_step = spec.warmup - 1  # CPU: the last warm-up step (the optimizer state exists by then)
    warm_start = time.perf_counter()
    for step in range(total):
        stopping = stop is not None and stop.is_set()
        if dist is not None:
            stopping = dist.agree(stopping)  # every rank stops at the same step, or the collectives hang
        if stopping:
            raise _Stopped
        seconds, loss = _timed_step(torch, loop, memory, cpu and step == counted_step, dist)
        outcome.losses.append(loss)
        outcome.peak_bytes = max(outcome.peak_bytes, memory.peak())
        if step < spec.warmup:
            outcome.warmup_s = time.perf_counter() - warm_start
        else:
            outcome.step_times_s.append(seconds)
        if on_step is not None:
            on_step(StepUpdate(step=step + 1, total=total, warmup=step < spec.warmup, step_time_s=seconds,
                               peak_bytes=outcome.peak_bytes, loss=loss))
        if not math.isfinite(loss):
            outcome.status = "nonfinite"
            outcome.message = f"loss {loss} at step {step + 1} under {spec.plan.precision}"
            return
    if dist is not None:
        dist.measure_sync_share(loop.net, loop.forward, next(iter(loop.loader)), loop.device, loop.dtype)


def _timed_step(torch, loop: _Loop, memory: TrialMemory, counted: bool, dist) -> tuple[float, float]:
    """One optimizer step, timed: CUDA events on CUDA, wall time on the CPU; with ``counted``, its live
    tensors are counted (and held to the limit). Returns (seconds, the step's loss, mean over the ranks)."""
    cuda = loop.device.type == Device.CUDA
    if cuda:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
    t0 = time.perf_counter()
    tracker = count_live_tensors(loop.net, loop.optimizer) if counted else None
    with tracker if tracker is not None else contextlib.nullcontext():
        step_loss = _optimizer_step(torch, loop, tracker, dist)
    if tracker is not None:
        memory.counted(tracker)
    if cuda:
        end.record()
        end.synchronize()
        seconds = begin.elapsed_time(end) / 1000.0
    else:
        seconds = time.perf_counter() - t0
    value = float(step_loss.item())
    if dist is not None:
        value = dist.mean(value)
    return seconds, value


def _optimizer_step(torch, loop: _Loop, tracker, dist):
    """Forward and backward over the accumulation's micro-batches, then the optimizer step; the step's loss
    (a 0-d tensor: the sum of loss / accumulation). ``tracker`` (or None) learns each phase."""
    step_loss = torch.zeros((), device=loop.device)
    for micro in range(loop.accumulation):
        batch = {k: v.to(loop.device, non_blocking=loop.non_blocking) for k, v in next(loop.batches).items()}
        last = micro == loop.accumulation - 1
        sync = dist.sync(loop.net, last) if dist is not None else contextlib.nullcontext()
        mark_phase(tracker, "forward")
        with sync, torch.autocast(loop.device.type, dtype=loop.dtype, enabled=loop.dtype is not None):
            with loop.offload:  # the forward only, as TRL's SFTTrainer does
                loss = loop.forward(**batch).loss / loop.accumulation
            mark_phase(tracker, "backward")
            (loop.scaler.scale(loss) if loop.scaler is not None else loss).backward()
        step_loss += loss.detach()
        del loss, batch
    mark_phase(tracker, "optimizer")
    if loop.scaler is not None:
        loop.scaler.step(loop.optimizer)
        loop.scaler.update()
    else:
        loop.optimizer.step()
    loop.optimizer.zero_grad(set_to_none=True)
    return step_loss


def run_distributed_trial(model: ModelProfile, plan: Plan, seq_len: int, *, nproc: int, kind: str, steps: int = 10,
                          warmup: int = 2, torch_compile: bool = False, dataloader_num_workers: int = 0,
                          dataloader_pin_memory: bool = False, memory_limit_bytes: int | None = None,
                          on_step: Callable[[StepUpdate], None] | None = None, stop: threading.Event | None = None,
                          config: dict | None = None, timeout_s: float = 3600.0) -> TrialOutcome:
    """Run the trial on ``nproc`` processes through torchrun (``advisor.measure.dist_worker`` on every rank).

    ``kind``: 'ddp', 'zero-2' (FSDP SHARD_GRAD_OP) or 'zero-3' (FSDP FULL_SHARD), or an FSDP strategy
    (``dist_worker.KINDS``). The ranks read a :class:`TrialSpec` from ``spec.json`` and write a
    :class:`RankOutcome` each. torchrun starts in its own session, so a Ctrl-C reaches only this process:
    ``stop`` becomes a stop file the ranks agree on at the next step boundary. Returns rank 0's losses and
    step times, the largest per-rank peak (bytes), every rank's outcome in ``ranks``, and the gradient
    synchronisation's share. A rank that fails brings the others down (torchrun); a run past ``timeout_s``
    seconds is killed. Every failure is a status, never an exception.
    """
    import tempfile

    from probes.model import load_config

    start = time.perf_counter()
    spec = TrialSpec(model=model, plan=plan, seq_len=seq_len, steps=steps, warmup=warmup, torch_compile=torch_compile,
                     dataloader_num_workers=dataloader_num_workers, dataloader_pin_memory=dataloader_pin_memory,
                     memory_limit_bytes=memory_limit_bytes, kind=kind,
                     config=config if config is not None else load_config(model.config_path or model.id)[0])
    with tempfile.TemporaryDirectory(prefix="advisor-trial-") as tmp:
        folder = Path(tmp)
        (folder / "spec.json").write_text(spec.model_dump_json())
        code, errors = _torchrun(folder, nproc, on_step, stop, deadline=start + timeout_s)
        ranks = sorted((RankOutcome.model_validate_json(p.read_text()) for p in folder.glob("rank*.json")),
                       key=lambda r: r.rank)
    outcome = TrialOutcome(status="ok", wall_s=time.perf_counter() - start, ranks=ranks)
    if not ranks:
        last = next((line.strip() for line in reversed(errors) if line.strip()), f"torchrun exited {code}")
        outcome.status, outcome.message = "error", f"distributed trial failed: {last[:300]}"
        return outcome
    _combine(outcome, ranks, nproc, code)
    return outcome


def _torchrun(folder: Path, nproc: int, on_step: Callable[[StepUpdate], None] | None,
              stop: threading.Event | None, deadline: float) -> tuple[int, list[str]]:
    """Run the ranks on ``folder / 'spec.json'``, passing rank 0's step events to ``on_step``; torchrun's
    exit status and its stderr lines. The stop event becomes the ranks' stop file; past ``deadline``
    (a ``time.perf_counter()`` value) the run is killed."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "advisor.measure.dist_worker", str(folder / "spec.json")]
    env = {**os.environ, "OMP_NUM_THREADS": str(max((os.cpu_count() or 1) // nproc, 1)),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                       os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)
    reader.start()
    watcher_done = threading.Event()

    def watch() -> None:  # the stop event becomes the ranks' stop file; a timeout kills the run
        while not watcher_done.wait(0.2):
            if stop is not None and stop.is_set():
                (folder / "stop").touch()
            if time.perf_counter() > deadline:
                proc.kill()

    threading.Thread(target=watch, daemon=True).start()
    try:
        for line in proc.stdout:
            event = parse_event(line)
            if isinstance(event, StepEvent) and on_step is not None:
                on_step(event.update)
            # a RankDoneEvent needs nothing here: the rank's figures are in its rank<R>.json
        code = proc.wait()
    except BaseException:  # a second Ctrl-C / SIGTERM: torchrun and its ranks (their own session) end with us
        _end_session(proc)
        raise
    finally:
        watcher_done.set()
    reader.join(timeout=5)
    return code, errors


def _end_session(proc: subprocess.Popen) -> None:
    """SIGTERM to torchrun's process group (it forwards to its ranks), SIGKILL after 5 s if it is still there."""
    import signal

    for signum, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, signum)
            proc.wait(timeout=wait_s)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _combine(outcome: TrialOutcome, ranks: list[RankOutcome], nproc: int, code: int) -> None:
    """Fill ``outcome`` from the ranks' outcomes: the worst status, rank 0's losses and times, the largest
    peaks (bytes), the median gradient-sync share."""
    worst = min(ranks, key=lambda r: _SEVERITY.get(r.status, 2))
    first = ranks[0]
    outcome.status = worst.status if len(ranks) == nproc or worst.status != "ok" else "error"
    outcome.message = worst.message or ("" if len(ranks) == nproc else
                                        f"only {len(ranks)} of {nproc} ranks reported (torchrun exited {code})")
    outcome.losses, outcome.step_times_s = first.losses, first.step_times_s
    outcome.warmup_s = first.warmup_s
    outcome.peak_bytes = max(r.peak_bytes for r in ranks)
    outcome.device_bytes = max(r.device_bytes for r in ranks)
    reserved = [r.reserved_bytes for r in ranks if r.reserved_bytes is not None]
    outcome.reserved_bytes = max(reserved) if reserved else None
    outcome.phase_peaks = first.phase_peaks
    shares = [r.sync_share for r in ranks if r.sync_share is not None]
    outcome.sync_share = statistics.median(shares) if shares else None
