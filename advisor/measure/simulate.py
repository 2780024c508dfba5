"""Simulate training steps of the real transformers model under ``FakeTensorMode``: exact tensor
accounting, no real memory, no GPU (``advisor estimate ... --simulate``).

The model is built from its config inside PyTorch's ``FakeTensorMode``
(https://pytorch.org/docs/stable/torch.compiler_fake_tensor.html), and a ``TorchDispatchMode``
counts the bytes of every live storage, as ``torch.distributed._tools.mem_tracker.MemTracker``
does (weak references on untyped storages, freed when the last reference dies). Two optimizer
steps run, so the lazily created optimizer state is counted. The peak equals what
``torch.cuda.max_memory_allocated()`` would report, up to the caching allocator's 512-byte rounding.

Fake CUDA tensors need a CUDA build of torch, so the step runs on fake CPU tensors and the CUDA
step is modelled:

- attention: SDPA, with the attention-dropout probability set to 0, so that the CPU picks its
  flash kernel, which like CUDA's flash / memory-efficient kernels keeps only the output and the
  log-sum-exp, not the s x s probabilities (CUDA draws the dropout mask from the RNG state);
- AdamW: ``fused=True`` for a CUDA plan (no foreach temporaries), ``foreach=True`` for a CPU plan;
  Adafactor as the Trainer builds it (``scale_parameter=False, relative_step=False``);
- mixed precision: CPU autocast with the plan's dtype; CPU and CUDA autocast cast the same ops;
- the batch is unpadded (no attention mask), like packed training batches: a padding mask would
  add a (b, 1, s, s) mask tensor.

Known limitations: encoder-decoder classification heads (T5) check each row's EOS tokens, a
data-dependent step fake tensors cannot run, and so is a mixture of experts' routing (transformers'
eager experts pick the tokens of each expert with ``nonzero``; its default ``grouped_mm`` runs only
bf16 inputs on the CPU); 8-bit Adam (bitsandbytes' CUDA kernels) cannot run on fake CPU tensors;
GradScaler's unscale buffers (fp16) are not simulated; the ZeRO / DDP wrappers are not simulated.
Imports torch and transformers (off the fast path).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

from advisor.measure.trainable import (autocast_dtype, build_model, enable_checkpointing, hf_config, make_optimizer,
                                       synthetic_batch)
from probes.errors import UsageError
from probes.model import ModelProfile
from probes.vocabulary import Device, Optimizer, Parallelism, Task
from rules import Plan


@dataclass
class SimulationResult:
    """Peak live bytes of the simulated steps and where they happened."""

    peak_bytes: int  #: most bytes held by live tensors (max_memory_allocated), bytes
    peak_phase: str  #: 'forward', 'backward' or 'optimizer'
    phase_peaks: dict[str, int]  #: peak per phase, bytes
    wall_s: float  #: seconds the simulation took


def live_bytes_mode():
    """A ``TorchDispatchMode`` counting live storage bytes, with the peak per phase (set ``.phase``)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.weak import WeakIdKeyDictionary

    class LiveBytes(TorchDispatchMode):
        """Counts the bytes of live storages created under it; keeps the peak per phase."""

        def __init__(self) -> None:
            super().__init__()
            self.storages = WeakIdKeyDictionary()
            self.refs: list = []
            self.current = 0
            self.phase = "build"
            self.phase_peaks: dict[str, int] = {}

        def _free(self, nbytes: int, _ref) -> None:
            self.current -= nbytes

        def track(self, t) -> None:
            st = t.untyped_storage()
            if st in self.storages:
                return
            nbytes = st.nbytes()
            self.storages[st] = nbytes
            self.refs.append(weakref.ref(st, lambda ref, n=nbytes: self._free(n, ref)))
            self.current += nbytes
            if self.current > self.phase_peaks.get(self.phase, 0):
                self.phase_peaks[self.phase] = self.current

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.track(t)
            return out

    return LiveBytes()


def simulate(model: ModelProfile, plan: Plan, seq_len: int, steps: int = 2,
             config: dict | None = None) -> SimulationResult:
    """Run ``steps`` optimizer steps of ``plan`` on fake tensors and measure the live-bytes peak.

    ``config`` is the config.json dict (default: loaded again from the model's id or path).

    Accumulation runs at most 2 micro-batches per step: the peak repeats from the second on.
    Raises:
        UsageError: a plan the simulation cannot run (8-bit Adam, ZeRO, several GPUs, a mixture of experts).
    """
    if plan.parallelism != Parallelism.NONE:
        raise UsageError("--simulate runs one device: drop --parallelism / use one GPU")
    if plan.optimizer == Optimizer.ADAMW_8BIT:
        raise UsageError(f"--simulate cannot run {Optimizer.ADAMW_8BIT}: bitsandbytes' 8-bit kernels need a real "
                         "CUDA device; use the analytic estimate (without --simulate)")
    if model.num_experts:
        raise UsageError(f"--simulate cannot run the mixture of experts {model.model_type}: routing tokens to experts "
                         "is data-dependent, which fake tensors cannot run; use the analytic estimate")
    if model.family == "encoder-decoder" and model.task in (Task.SEQUENCE_CLASSIFICATION,
                                                            Task.QUESTION_ANSWERING):
        raise UsageError(f"--simulate cannot run {model.model_type} with a {model.task} head: it checks each row's "
                         "EOS tokens, which fake tensors cannot; use the analytic estimate")
    import warnings

    import torch
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode

    start = time.perf_counter()
    transformers.logging.set_verbosity_error()  # its config notes are not advisor's diagnostics
    warnings.filterwarnings("ignore", module="torch.utils.checkpoint")
    config = hf_config(model, plan, config, zero_attention_dropout=plan.device == Device.CUDA)
    dtype = autocast_dtype(plan.precision)
    tracker = live_bytes_mode()
    with FakeTensorMode(allow_non_fake_inputs=True), tracker:
        net = build_model(model, config)
        net.train()
        if plan.gradient_checkpointing:
            enable_checkpointing(net)
        optimizer = make_optimizer([p for p in net.parameters() if p.requires_grad], plan)
        batch = synthetic_batch(model, config, plan.micro_batch_size, seq_len)
        micro_steps = min(plan.gradient_accumulation_steps, 2)
        for _ in range(steps):
            for _ in range(micro_steps):
                tracker.phase = "forward"
                with torch.autocast(Device.CPU.value, dtype=dtype, enabled=dtype is not None):
                    loss = net(**batch).loss / plan.gradient_accumulation_steps
                tracker.phase = "backward"
                loss.backward()
                del loss
            tracker.phase = "optimizer"
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    peaks = {k: v for k, v in tracker.phase_peaks.items() if k != "build"}
    phase = max(peaks, key=peaks.get)
    return SimulationResult(peak_bytes=peaks[phase], peak_phase=phase, phase_peaks=peaks,
                            wall_s=time.perf_counter() - start)
