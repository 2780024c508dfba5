"""One trial: real training steps of a plan on this machine's device, measured.

The model is built from its config (random weights, or the local weights when its folder has
them; never downloaded), fed a synthetic batch of the plan's shape through a ``DataLoader`` with
the planned workers and pinned memory, and trained for warm-up steps and then timed steps with
exactly the plan: autocast bf16 / fp16 with ``torch.amp.GradScaler`` for fp16 (PyTorch
"Automatic Mixed Precision", https://pytorch.org/docs/stable/amp.html), the TF32 flags
(https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices),
activation checkpointing, gradient accumulation, the optimizer and ``torch.compile``.

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
import gc
import math
import os
import resource
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from advisor.measure.trainable import (build_model, enable_checkpointing, hf_config, local_weights_dir, make_optimizer,
                               synthetic_batch)
from probes.model import ModelProfile
from rules import Plan

TrialStatus = Literal["ok", "oom", "nonfinite", "error", "interrupted"]


class TrialOutOfMemory(Exception):
    """The trial outgrew its memory: a CUDA out-of-memory error, or the CPU memory limit."""


@dataclass
class StepUpdate:
    """Progress of one finished optimizer step (what the progress bar shows)."""

    step: int  #: 1-based, warm-up included
    total: int  #: warm-up + timed steps
    warmup: bool  #: a warm-up step (not timed)
    step_time_s: float  #: seconds of this optimizer step
    peak_bytes: int  #: peak memory so far in this trial, bytes
    loss: float  #: the step's loss (sum over the micro-batches of loss / accumulation)

    def describe(self) -> str:
        """One line for progress displays: step n/N, its time, the peak so far (when counted), the loss."""
        peak = f", peak {self.peak_bytes / 2**30:.2f} GiB" if self.peak_bytes else ""
        return (f"{'warm-up' if self.warmup else 'step'} {self.step}/{self.total}: {self.step_time_s:.3f} s{peak}, "
                f"loss {self.loss:.3f}")


@dataclass
class TrialOutcome:
    """What one trial measured."""

    status: TrialStatus
    message: str = ""
    losses: list[float] = field(default_factory=list)  #: every finished step's loss, warm-up included
    step_times_s: list[float] = field(default_factory=list)  #: timed steps only, seconds
    warmup_s: float = 0.0  #: seconds of the warm-up steps (compilation, allocator warm-up)
    peak_bytes: int = 0  #: most bytes of live tensors (CUDA: max_memory_allocated; CPU: counted step), bytes
    phase_peaks: dict[str, int] = field(default_factory=dict)  #: CPU: peak per phase of the counted step, bytes
    reserved_bytes: int | None = None  #: CUDA: max_memory_reserved, bytes
    device_bytes: int = 0  #: CUDA: NVML used by this process (else reserved + context); CPU: peak RSS, bytes
    wall_s: float = 0.0  #: seconds the whole trial took, building included
    ranks: list[dict] = field(default_factory=list)  #: distributed: each rank's outcome (rank, peak_bytes, ...)
    sync_share: float | None = None  #: distributed: gradient synchronisation's share of a micro-batch


class _Stopped(Exception):
    """The stop event was set: end at this step boundary."""


def _proc_status(key: str) -> int | None:
    """A ``/proc/self/status`` memory field in bytes (Linux), else None."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the peak RSS (``VmHWM``) to the current RSS: proc(5), ``/proc/[pid]/clear_refs`` value 5."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_rss() -> int:
    """Peak resident set size of this process, bytes."""
    hwm = _proc_status("VmHWM")
    if hwm is not None:
        return hwm
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _nvml_used_bytes(torch) -> int | None:
    """GPU memory NVML shows in use by this process (all processes when per-process data is hidden)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory:
                return int(proc.usedGpuMemory)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:  # NVML missing, old driver, no permission: the reserved bytes stand in
        return None


class _Memory:
    """Peak memory of the running trial, and the limit check.

    CUDA: the caching allocator's statistics, and its per-process memory fraction as the limit.
    CPU: the live-tensor peak of one untimed step counted as the simulator counts it (a
    ``TorchDispatchMode`` over the storages; the same quantity as CUDA's ``max_memory_allocated``),
    compared with the limit after that step; and the process's peak RSS.
    """

    def __init__(self, torch, cuda: bool, limit_bytes: int | None) -> None:
        self.torch, self.cuda, self.limit = torch, cuda, limit_bytes
        self.live_peak = 0
        self.phase_peaks: dict[str, int] = {}
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            if limit_bytes:
                total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total))
        else:
            gc.collect()
            _reset_peak_rss()

    def peak(self) -> int:
        """Peak bytes of live tensors so far (CPU: of the counted step; 0 before it)."""
        if self.cuda:
            return int(self.torch.cuda.max_memory_allocated())
        return self.live_peak

    def counted(self, tracker) -> None:
        """Take the CPU peaks from the tracker of the counted step; raise over the limit."""
        self.phase_peaks = {k: v for k, v in tracker.phase_peaks.items() if k != "build"}
        self.live_peak = max(self.phase_peaks.values(), default=0)
        if self.limit and self.live_peak > self.limit:
            raise TrialOutOfMemory(f"live tensors peaked at {self.live_peak / 2**30:.3f} GiB, over the "
                                   f"{self.limit / 2**30:.3f} GiB limit")

    def release(self) -> None:
        if self.cuda and self.limit:
            self.torch.cuda.set_per_process_memory_fraction(1.0)


class _Rows:
    """A map-style dataset over the rows of a dict of tensors (DataLoader's default collate stacks them)."""

    def __init__(self, tensors: dict) -> None:
        self.tensors = tensors
        self.n = len(next(iter(tensors.values())))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {k: v[i] for k, v in self.tensors.items()}


def _count_live_tensors(net, optimizer):
    """A live-bytes counter (the simulator's) that already holds the weights, buffers and optimizer state."""
    from advisor.measure.simulate import live_bytes_mode

    tracker = live_bytes_mode()
    tracker.phase = "build"
    for t in list(net.parameters()) + list(net.buffers()):
        tracker.track(t)
    for state in optimizer.state.values():
        for value in state.values():
            if hasattr(value, "untyped_storage"):
                tracker.track(value)
    return tracker


def _phase(tracker, name: str) -> None:
    if tracker is not None:
        tracker.phase = name
        tracker.phase_peaks[name] = max(tracker.phase_peaks.get(name, 0), tracker.current)


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
        memory_limit_bytes: make the device smaller than it is (a forced out-of-memory).
        on_step: called after every optimizer step.
        stop: when set, the trial ends at the next step boundary with status ``interrupted``.
        config: the config.json dict (default: read again from the model's path or id).
        dist: this rank of a distributed trial (``advisor.measure.dist_worker.Distributed``), or None.
    Returns:
        The outcome; every failure is a status (``oom``, ``nonfinite``, ``error``,
        ``interrupted``), never an exception, and all the trial's memory is freed.
    """
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="torch.utils.checkpoint")
    cuda = plan.device == "cuda"
    if not cuda:
        warmup = max(warmup, 2)
    outcome = TrialOutcome(status="ok")
    start = time.perf_counter()
    memory = _Memory(torch, cuda, memory_limit_bytes)
    try:
        _train(torch, model, plan, seq_len, steps, warmup, torch_compile, dataloader_num_workers,
               dataloader_pin_memory, memory, outcome, on_step, stop, config, dist)
    except (torch.cuda.OutOfMemoryError, TrialOutOfMemory) as err:
        outcome.status = "oom"
        outcome.message = f"out of memory: {str(err).splitlines()[0][:300]}"
    except (_Stopped, KeyboardInterrupt):
        outcome.status = "interrupted"
        outcome.message = "stopped at a step boundary (Ctrl-C)"
    except Exception as err:  # a trial that cannot run is a finding, reported with the plan
        outcome.status = "error"
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        outcome.message = f"{type(err).__name__}: {first}"
    finally:
        outcome.peak_bytes = max(outcome.peak_bytes, memory.peak())
        outcome.phase_peaks = memory.phase_peaks
        if cuda:
            outcome.reserved_bytes = int(torch.cuda.max_memory_reserved())
            used = _nvml_used_bytes(torch)
            outcome.device_bytes = used if used is not None else outcome.reserved_bytes
        else:
            outcome.device_bytes = _peak_rss()
        memory.release()
        gc.collect()  # the traceback's frames are gone once the except blocks have ended
        if cuda:
            torch.cuda.empty_cache()
        outcome.wall_s = time.perf_counter() - start
    return outcome


def _train(torch, model: ModelProfile, plan: Plan, seq_len: int, steps: int, warmup: int, torch_compile: bool,
           workers: int, pin: bool, memory: _Memory, outcome: TrialOutcome,
           on_step: Callable[[StepUpdate], None] | None, stop: threading.Event | None, raw: dict | None,
           dist=None) -> None:
    """The training loop; its locals (model, optimizer, batches) die when it returns or raises.

    ``dist`` (an ``advisor.measure.dist_worker.Distributed``) makes it one rank of a data-parallel run: the
    model is wrapped (DDP or FSDP) before the optimizer is built, each rank reads its own batches,
    accumulation skips the gradient sync until the last micro-batch, and a stop is agreed by all ranks.
    """
    cuda = plan.device == "cuda"
    device = dist.device if dist is not None else torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = plan.tf32
        torch.backends.cudnn.allow_tf32 = plan.tf32
    torch.manual_seed(0)
    config = hf_config(model, plan, raw)
    net = build_model(model, config, weights=local_weights_dir(model)).to(device)
    net.train()
    if plan.gradient_checkpointing:
        enable_checkpointing(net)
    if dist is not None:
        net = dist.wrap(net)
    optimizer = make_optimizer([p for p in net.parameters() if p.requires_grad], plan)
    forward = torch.compile(net) if torch_compile else net
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(plan.precision)
    scaler = torch.amp.GradScaler(device.type) if plan.precision == "fp16" else None
    accumulation, total = plan.gradient_accumulation_steps, warmup + steps
    generator = torch.Generator().manual_seed(dist.rank if dist is not None else 0)
    rows = synthetic_batch(model, config, plan.micro_batch_size * accumulation * total, seq_len, generator)
    loader = torch.utils.data.DataLoader(_Rows(rows), batch_size=plan.micro_batch_size, shuffle=False,
                                         num_workers=workers, pin_memory=pin and cuda, drop_last=True)
    batches = iter(loader)
    counted_step = warmup - 1  # CPU: the last warm-up step (the optimizer state exists by then)
    warm_start = time.perf_counter()
    for step in range(total):
        stopping = stop is not None and stop.is_set()
        if dist is not None:
            stopping = dist.agree(stopping)  # every rank stops at the same step, or the collectives hang
        if stopping:
            raise _Stopped
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        t0 = time.perf_counter()
        tracker = _count_live_tensors(net, optimizer) if not cuda and step == counted_step else None
        with tracker if tracker is not None else contextlib.nullcontext():
            step_loss = torch.zeros((), device=device)
            for micro in range(accumulation):
                batch = {k: v.to(device, non_blocking=pin) for k, v in next(batches).items()}
                sync = dist.sync(net, micro == accumulation - 1) if dist is not None else contextlib.nullcontext()
                _phase(tracker, "forward")
                with sync, torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                    loss = forward(**batch).loss / accumulation
                    _phase(tracker, "backward")
                    (scaler.scale(loss) if scaler is not None else loss).backward()
                step_loss += loss.detach()
                del loss, batch
            _phase(tracker, "optimizer")
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
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
        outcome.losses.append(value)
        outcome.peak_bytes = max(outcome.peak_bytes, memory.peak())
        if step < warmup:
            outcome.warmup_s = time.perf_counter() - warm_start
        else:
            outcome.step_times_s.append(seconds)
        if on_step is not None:
            on_step(StepUpdate(step=step + 1, total=total, warmup=step < warmup, step_time_s=seconds,
                               peak_bytes=outcome.peak_bytes, loss=value))
        if not math.isfinite(value):
            outcome.status = "nonfinite"
            outcome.message = f"loss {value} at step {step + 1} under {plan.precision}"
            return
    if dist is not None:
        dist.measure_sync_share(net, forward, next(iter(loader)), device, dtype)


def run_distributed_trial(model: ModelProfile, plan: Plan, seq_len: int, *, nproc: int, kind: str, steps: int = 10,
                          warmup: int = 2, torch_compile: bool = False, dataloader_num_workers: int = 0,
                          dataloader_pin_memory: bool = False, memory_limit_bytes: int | None = None,
                          on_step: Callable[[StepUpdate], None] | None = None, stop: threading.Event | None = None,
                          config: dict | None = None, timeout_s: float = 3600.0) -> TrialOutcome:
    """Run the trial on ``nproc`` processes through torchrun (``advisor.measure.dist_worker`` on every rank).

    ``kind``: 'ddp', 'zero-2' (FSDP SHARD_GRAD_OP) or 'zero-3' (FSDP FULL_SHARD). torchrun starts in its
    own session, so a Ctrl-C reaches only this process: ``stop`` becomes a stop file the ranks agree on
    at the next step boundary. Returns rank 0's losses and step times, the largest per-rank peak, every
    rank's outcome in ``ranks``, and the gradient synchronisation's share. A rank that fails brings the
    others down (torchrun); a run past ``timeout_s`` is killed.
    """
    import json
    import subprocess
    import tempfile

    from probes.model import load_config

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="advisor-trial-") as tmp:
        folder = Path(tmp)
        spec = {"model": model.model_dump(mode="json"), "plan": plan.model_dump(mode="json"), "seq_len": seq_len,
                "steps": steps, "warmup": warmup, "torch_compile": torch_compile,
                "dataloader_num_workers": dataloader_num_workers, "dataloader_pin_memory": dataloader_pin_memory,
                "memory_limit_bytes": memory_limit_bytes, "kind": kind,
                "config": config if config is not None else load_config(model.config_path or model.id)[0]}
        (folder / "spec.json").write_text(json.dumps(spec))
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
                if time.perf_counter() - start > timeout_s:
                    proc.kill()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        for line in proc.stdout:
            if line.startswith('{"event": "step"'):
                data = json.loads(line)
                data.pop("event")
                if on_step is not None:
                    on_step(StepUpdate(**data))
        code = proc.wait()
        watcher_done.set()
        reader.join(timeout=5)
        ranks = sorted((json.loads(p.read_text()) for p in folder.glob("rank*.json")), key=lambda r: r["rank"])
    outcome = TrialOutcome(status="ok", wall_s=time.perf_counter() - start, ranks=ranks)
    if not ranks:
        last = next((line.strip() for line in reversed(errors) if line.strip()), f"torchrun exited {code}")
        outcome.status, outcome.message = "error", f"distributed trial failed: {last[:300]}"
        return outcome
    order = {"oom": 0, "nonfinite": 1, "error": 2, "interrupted": 3, "ok": 4}
    worst = min(ranks, key=lambda r: order.get(r["status"], 2))
    first = ranks[0]
    outcome.status = worst["status"] if len(ranks) == nproc or worst["status"] != "ok" else "error"
    outcome.message = worst["message"] or ("" if len(ranks) == nproc else
                                           f"only {len(ranks)} of {nproc} ranks reported (torchrun exited {code})")
    outcome.losses, outcome.step_times_s = first["losses"], first["step_times_s"]
    outcome.warmup_s = first["warmup_s"]
    outcome.peak_bytes = max(r["peak_bytes"] for r in ranks)
    outcome.device_bytes = max(r["device_bytes"] for r in ranks)
    reserved = [r["reserved_bytes"] for r in ranks if r["reserved_bytes"] is not None]
    outcome.reserved_bytes = max(reserved) if reserved else None
    outcome.phase_peaks = first["phase_peaks"]
    shares = [r["sync_share"] for r in ranks if r.get("sync_share") is not None]
    outcome.sync_share = statistics.median(shares) if shares else None
    return outcome
