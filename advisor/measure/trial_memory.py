"""The memory side of a trial: its peaks, the limit it is held to, and the device's own figures.

CUDA: the caching allocator's statistics (``torch.cuda.max_memory_allocated()`` /
``max_memory_reserved()``), its per-process memory fraction as the limit, and the memory NVML
shows in use by this process. CPU: the live-tensor peak of one untimed step counted as the
simulator counts it (:func:`advisor.measure.simulate.live_bytes_mode`), compared with the limit
after that step, and the process's peak resident set size (Linux ``VmHWM``, reset per trial
through ``/proc/self/clear_refs``).

Takes torch as an argument (imported by the trial, off the fast path).
"""

from __future__ import annotations

import gc
import resource
import sys

from advisor.measure.outcome import TrialOutcome
from advisor.core.units import GIB


class TrialOutOfMemory(Exception):
    """The trial outgrew its memory: a CUDA out-of-memory error, or the CPU memory limit."""


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
    from probes.nvml_memory import bus_id, process_used_bytes

    return process_used_bytes(bus_id(torch.cuda.get_device_properties(torch.cuda.current_device())))


class TrialMemory:
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
            raise TrialOutOfMemory(
                f"live tensors peaked at {self.live_peak / GIB:.3f} GiB, over the {self.limit / GIB:.3f} GiB limit"
            )

    def finish(self, outcome: TrialOutcome) -> None:
        """Put the trial's peaks and the device's figures in ``outcome`` (bytes), lift the limit and free
        the trial's memory (its frames must be gone: call it after the except blocks have ended)."""
        torch = self.torch
        outcome.peak_bytes = max(outcome.peak_bytes, self.peak())
        outcome.phase_peaks = self.phase_peaks
        if self.cuda:
            outcome.reserved_bytes = int(torch.cuda.max_memory_reserved())
            used = _nvml_used_bytes(torch)
            outcome.device_bytes = used if used is not None else outcome.reserved_bytes
        else:
            outcome.device_bytes = _peak_rss()
        if self.cuda and self.limit:
            torch.cuda.set_per_process_memory_fraction(1.0)
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def count_live_tensors(net, optimizer):
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


def mark_phase(tracker, name: str) -> None:
    """Start phase ``name`` ('forward', 'backward', 'optimizer') of a counted step; nothing without a tracker."""
    if tracker is not None:
        tracker.phase = name
        tracker.phase_peaks[name] = max(tracker.phase_peaks.get(name, 0), tracker.current)
