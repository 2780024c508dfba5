"""Checks a training run against advisor's prediction while it trains, and keeps what it measured.

``Tracker`` watches the optimizer steps of a loop it does not touch: after ``warmup_steps`` it times
``measure_steps`` steps (wall-clock between step ends; the GPU synchronised at the window's two ends only), reads
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` where CUDA runs (the process's RSS growth on the CPU),
logs one line of predicted against measured, warns early (memory past the prediction's band, a GPU heading for out
of memory, throughput below :data:`SLOW_SHARE` of the prediction with the cause it can see: waiting for batches,
recompiles, pageable host-to-device copies), and appends a record to the local store
(:mod:`advisor.measure.run_store`, never sent anywhere). It never changes the training. ``track`` is its context
manager for a plain PyTorch / accelerate loop; :mod:`advisor.integrations.hf` its transformers callback.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator

from advisor.core.errors import UsageError
from advisor.core.text import shown
from advisor.core.units import GIB
from advisor.core.vocabulary import Device
from advisor.integrations.prediction import Prediction, load
from advisor.measure import run_store

LOG = logging.getLogger("advisor.integrations")
#: Throughput below this share of the prediction is worth a warning.
SLOW_SHARE = 0.8
#: A data-loader wait above this share of the step time is named as the likely cause.
WAIT_SHARE = 0.1
#: Reserved memory above this share of the GPU's memory: the run heads for out of memory.
OOM_SHARE = 0.95
#: After the measured window, memory is checked every this many steps (a longer sequence later in the data).
LATER_CHECK_EVERY = 50


def _rss_bytes() -> int | None:
    """This process's resident memory now (Linux ``/proc/self/statm``), bytes; None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _torch():
    """torch where the training loaded it (never imported here)."""
    return sys.modules.get("torch")


def _graphs() -> int | None:
    """torch.compile's graphs compiled so far (dynamo's counters), or None without torch.compile loaded."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    try:
        return int(dynamo.counters["stats"]["unique_graphs"]) if dynamo else None
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _ensure_handler() -> None:
    """Make the summary line visible on stderr when the program configured no logging."""
    if not LOG.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        LOG.addHandler(handler)
    if LOG.level == logging.NOTSET:
        LOG.setLevel(logging.INFO)


#: The options a :class:`Tracker` (and :class:`~advisor.integrations.hf.AdvisorCallback`) takes from its caller.
OPTIONS = ("warmup_steps", "measure_steps", "store", "pin_memory", "model_id", "model", "optimizer")


def check_options(**options: Any) -> None:
    """Check a Tracker's options before the run: known names, ``warmup_steps`` and ``measure_steps`` whole numbers
    >= 1 (steps), ``store`` a bool. The callback checks them when it is made, not when the training begins.

    Raises:
        UsageError: an unknown option, or a value of another type or below 1 (one line naming it)."""
    for name, value in options.items():
        if name not in OPTIONS:
            raise UsageError(f"advisor.integrations: unknown option {shown(name, 40)} (options: {', '.join(OPTIONS)})")
        if name in ("warmup_steps", "measure_steps") and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise UsageError(
                f"advisor.integrations: {name} must be a whole number of steps >= 1, got {shown(repr(value), 40)}"
            )
        if name == "store" and not isinstance(value, bool):
            raise UsageError(f"advisor.integrations: store must be True or False, got {shown(repr(value), 40)}")


class Tracker:
    """Measures a run's optimizer steps against a :class:`~advisor.integrations.prediction.Prediction`.

    Call :meth:`step` after each optimizer step (``tokens``: the step's tokens, all devices, when known), optionally
    :meth:`step_begin` when a step's batch is ready (the time before it is counted as waiting for data), and
    :meth:`close` at the end (the context manager and the callback do). ``summary``, ``warnings`` and ``record`` hold
    the outcome. ``store``: append the record to the local store (default on). ``model`` and ``optimizer`` (optional):
    on the CPU, where torch keeps no allocator statistics, their tensors (weights, gradients, optimizer states: a lower
    bound of the peak) are what the predicted peak is checked against, read at the warm-up's end and the window's.

    Raises:
        UsageError: the plan cannot be read (:func:`~advisor.integrations.prediction.load`); an option of another type
            or below 1 (:func:`check_options`).
    """

    def __init__(
        self,
        plan: Any,
        *,
        warmup_steps: int = 2,
        measure_steps: int = 10,
        store: bool = True,
        pin_memory: bool | None = None,
        model_id: str | None = None,
        model: Any = None,
        optimizer: Any = None,
    ) -> None:
        check_options(warmup_steps=warmup_steps, measure_steps=measure_steps, store=store)
        self.prediction: Prediction = load(plan)
        self.warmup_steps, self.measure_steps, self.store = warmup_steps, measure_steps, store
        self.pin_memory, self.model_id = pin_memory, model_id
        self._model, self._optimizer = model, optimizer
        self._states_bytes: int | None = None
        self.steps = 0
        self.summary: str | None = None
        self.warnings: list[str] = []
        self.record: dict[str, Any] | None = None
        self._cuda = self._on_cuda()
        self._rss_start = _rss_bytes()
        self._rss_peak = self._rss_start
        self._last_end = time.perf_counter()
        self._times: list[float] = []
        self._waits: list[float] = []
        self._tokens: list[float] = []
        self._begin: float | None = None
        self._graphs_start: int | None = None
        self._memory_warned = False
        _ensure_handler()

    def _on_cuda(self) -> bool:
        torch = _torch()
        return bool(
            self.prediction.plan.get("device") == Device.CUDA.value and torch is not None and torch.cuda.is_available()
        )

    def step_begin(self) -> None:
        """A step's batch is ready: the time since the last step ended was spent waiting for it (and logging)."""
        self._begin = time.perf_counter()

    def step(self, tokens: float | None = None) -> None:
        """One optimizer step ended (``tokens``: its tokens over all devices; default the prediction's)."""
        self.steps += 1
        if self.summary is not None:  # the window is done: memory is looked at every LATER_CHECK_EVERY steps only
            if self.steps % LATER_CHECK_EVERY == 0:
                self._sample_memory()
            return
        if self.steps == self.warmup_steps or self.steps == self.warmup_steps + self.measure_steps:
            self._count_states()
        self._sample_memory()
        if self.steps == self.warmup_steps:
            self._sync()
            self._graphs_start = _graphs()
        elif self.steps > self.warmup_steps:
            end = (
                time.perf_counter()
                if not self._cuda or self.steps < self.warmup_steps + self.measure_steps
                else self._sync()
            )
            self._times.append(end - self._last_end)
            self._waits.append(self._begin - self._last_end if self._begin and self._begin >= self._last_end else 0.0)
            if tokens is not None:
                self._tokens.append(float(tokens))
            if self.steps >= self.warmup_steps + self.measure_steps:
                self._finish()
        self._last_end = time.perf_counter()
        self._begin = None

    def _sync(self) -> float:
        if self._cuda:
            _torch().cuda.synchronize()
        return time.perf_counter()

    def close(self) -> None:
        """The run ended: report on the steps measured so far (when the window was not complete)."""
        if self.summary is None and self._times:
            self._finish()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _memory(self) -> dict[str, Any]:
        """The memory figures measured so far (bytes)."""
        torch = _torch()
        if self._cuda:
            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            return {
                "peak_bytes": int(torch.cuda.max_memory_allocated()),
                "reserved_bytes": int(torch.cuda.max_memory_reserved()),
                "capacity_bytes": int(total),
            }
        growth = (
            self._rss_peak - self._rss_start if self._rss_peak is not None and self._rss_start is not None else None
        )
        return {"rss_bytes": self._rss_peak, "rss_growth_bytes": growth, "states_bytes": self._states_bytes}

    def _compared_memory(self, memory: dict[str, Any]) -> int | None:
        """The measured figure compared with the predicted peak: max_memory_allocated on CUDA; on the CPU the model
        states' bytes (a lower bound), else None."""
        return memory.get("peak_bytes") if self._cuda else memory.get("states_bytes")

    def _count_states(self) -> None:
        """On the CPU, the bytes of the model's weights and gradients and the optimizer's state tensors."""
        if self._cuda or self._model is None:
            return
        torch = _torch()
        seen: dict[int, int] = {}
        for p in self._model.parameters():
            for t in (p, p.grad):
                if t is not None:
                    seen[id(t)] = t.numel() * t.element_size()
        for state in getattr(self._optimizer, "state", {}).values():
            for t in state.values() if isinstance(state, dict) else ():
                if torch is not None and isinstance(t, torch.Tensor):
                    seen[id(t)] = t.numel() * t.element_size()
        self._states_bytes = sum(seen.values())

    def _sample_memory(self) -> None:
        """Sample the RSS (CPU) and warn at once when memory passes the prediction's band or the GPU's memory."""
        if not self._cuda:
            rss = _rss_bytes()
            if rss is not None and (self._rss_peak is None or rss > self._rss_peak):
                self._rss_peak = rss
        memory = self._memory()
        measured, predicted = self._compared_memory(memory), self.prediction.peak_bytes
        limit = predicted * (1 + self.prediction.memory_band) if predicted else None
        if not self._memory_warned and measured is not None and limit is not None and measured > limit:
            self._memory_warned = True
            what = "max_memory_allocated" if self._cuda else "the model states alone"
            self._warn(
                f"memory above the prediction: {what} {measured / GIB:.3f} GiB at step {self.steps}, predicted "
                f"peak {predicted / GIB:.3f} GiB ± {self.prediction.memory_band:.0%}: the plan may not fit as "
                "priced (a longer sequence, a larger batch, another stack than planned?)"
            )
        capacity = memory.get("capacity_bytes")
        if (
            capacity
            and memory.get("reserved_bytes", 0) > OOM_SHARE * capacity
            and "out of memory" not in " ".join(self.warnings)
        ):
            self._warn(
                f"heading for out of memory: {memory['reserved_bytes'] / GIB:.1f} GiB reserved of "
                f"{capacity / GIB:.1f} GiB at step {self.steps}"
            )

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        LOG.warning("advisor: warning: %s", message)

    def _measured(self) -> dict[str, Any]:
        """What the window measured: median step time (seconds), tokens/s, the wait share, recompiles, memory."""
        step = statistics.median(self._times)
        total = sum(self._times)
        tokens = (
            statistics.median(self._tokens)
            if len(self._tokens) == len(self._times)
            else self.prediction.tokens_per_step
        )
        graphs = _graphs()
        recompiles = graphs - self._graphs_start if graphs is not None and self._graphs_start is not None else None
        samples = (
            self.prediction.samples_per_s * self.prediction.step_time_s
            if self.prediction.samples_per_s and self.prediction.step_time_s
            else None
        )
        return {
            "step_time_s": step,
            "tokens_per_s": tokens / step if tokens else None,
            "samples_per_s": samples / step if samples else None,
            "steps": len(self._times),
            "data_wait_share": sum(self._waits) / total if total > 0 else 0.0,
            "recompiles": recompiles,
            "tokens_per_step": tokens,
            **self._memory(),
        }

    def _finish(self) -> None:
        measured = self._measured()
        self.summary = self._line(measured)
        LOG.info("%s", self.summary)
        self._check_speed(measured)
        self.record = run_store.record(
            source=run_store.SOURCE_CALLBACK,
            device=self._device(),
            model={"id": self.prediction.model_id or self.model_id, "task": self.prediction.task},
            plan=self.prediction.plan,
            seq_len=self.prediction.seq_len,
            predicted=self.prediction.figures(),
            measured=measured,
            notes="; ".join(self.warnings),
        )
        if self.store:
            try:
                run_store.append(self.record)
            except (OSError, ValueError) as err:
                LOG.warning("advisor: the run was not added to the local store (%s): %s", run_store.store_path(), err)

    def _device(self) -> dict[str, Any]:
        torch = _torch()
        if self._cuda:
            index = torch.cuda.current_device()
            return {
                "type": Device.CUDA.value,
                "name": torch.cuda.get_device_name(index),
                "count": self.prediction.plan.get("num_gpus") or 1,
                "driver": None,
                "cuda": torch.version.cuda,
            }
        from probes.hardware import read_host

        return {"type": Device.CPU.value, "name": read_host().cpu_model or Device.CPU.value, "count": 1, "driver": None}

    def _line(self, m: dict[str, Any]) -> str:
        """Predicted against measured in one line."""
        p = self.prediction
        parts = [f"advisor: predicted vs measured over {m['steps']} steps after {self.warmup_steps} warm-up:"]
        if p.step_time_s:
            parts.append(f"step {p.step_time_s:.3f} s vs {m['step_time_s']:.3f} s")
        if p.tokens_per_s and m["tokens_per_s"]:
            parts.append(
                f"tokens/s {p.tokens_per_s:,.0f} vs {m['tokens_per_s']:,.0f} "
                f"({m['tokens_per_s'] / p.tokens_per_s:.2f}x)"
            )
        measured = self._compared_memory(m)
        if p.peak_bytes and measured is not None:
            what = "peak memory" if self._cuda else "peak memory (CPU: model states, a lower bound)"
            parts.append(
                f"{what} {p.peak_bytes / GIB:.3f} GiB vs {measured / GIB:.3f} GiB "
                f"({measured / p.peak_bytes - 1:+.0%}, band ±{p.memory_band:.0%})"
            )
        return " ".join(parts[:1]) + " " + ", ".join(parts[1:])

    def _check_speed(self, m: dict[str, Any]) -> None:
        """Warn when throughput falls below :data:`SLOW_SHARE` of the prediction, with the likely cause."""
        p = self.prediction
        if p.tokens_per_s and m["tokens_per_s"]:
            share = m["tokens_per_s"] / p.tokens_per_s
        elif p.step_time_s:
            share = p.step_time_s / m["step_time_s"]
        else:
            return
        if share >= SLOW_SHARE:
            return
        causes = []
        if m["data_wait_share"] > WAIT_SHARE:
            causes.append(
                f"the data loader: {m['data_wait_share']:.0%} of the time waits for batches (more "
                "dataloader workers, pre-tokenised data)"
            )
        if m["recompiles"]:
            causes.append(
                f"torch.compile recompiled {m['recompiles']} graph(s) after warm-up (changing shapes: pad "
                "to fixed lengths)"
            )
        if self._cuda and self.pin_memory is False:
            causes.append("a host-to-device copy of each batch from pageable memory (dataloader_pin_memory)")
        cause = "; ".join(causes) or "no cause visible from the loop (kernels or links slower than priced)"
        self._warn(f"throughput {share:.2f}x of the prediction, below {SLOW_SHARE}x: likely {cause}")


@contextmanager
def track(plan: Any, **options: Any) -> Iterator[Tracker]:
    """A :class:`Tracker` for a plain PyTorch / accelerate loop: ``with track("plan.json") as t: ... t.step(tokens)``.

    ``plan``: an advisor JSON file (``recommend --json`` / ``estimate --json`` output), a folder with ``plan.json``, a
    dict or a Prediction; ``options``: :class:`Tracker`'s. The report is made when the block ends, if not before."""
    tracker = Tracker(plan, **options)
    try:
        yield tracker
    finally:
        tracker.close()
