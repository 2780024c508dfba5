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
- mixed precision: CPU autocast with the plan's dtype, and for a CUDA plan CUDA autocast's float32 ops
  (:mod:`advisor.measure.autocast_ops`: LayerNorm, softmax, pow ... run in float32 on a GPU, not in CPU autocast);
- the batch is unpadded (no attention mask), like packed training batches: a padding mask would
  add a (b, 1, s, s) mask tensor;
- pure bf16 weights: the model is built in bf16 (``dtype=torch.bfloat16``, what ``model_kwargs.json``
  loads), so there is no fp32 copy and AdamW's states take the weights' dtype;
- LoRA: the model is wrapped by ``peft.get_peft_model`` with the ``LoraConfig`` that ``--emit`` writes
  (frozen base, fp32 adapters, gradients and optimizer states for the adapters only);
- QLoRA: the 4-bit base is bitsandbytes' own layers and kernels over fake tensors
  (:mod:`advisor.measure.quantized_base`), wrapped by PEFT's 4-bit LoRA layer; that layer asks
  ``torch.is_autocast_enabled()`` (CUDA's) whether to cast its input, and a CUDA plan's step gets CPU
  autocast's answer.

Known limitations: bitsandbytes' optimizers (8-bit and paged AdamW) need a real CUDA device;
encoder-decoder classification heads (T5) check each row's EOS tokens,
a data-dependent step fake tensors cannot run; GradScaler's unscale buffers (fp16) are not simulated; the
ZeRO / DDP wrappers are not simulated; nor is a mixture of experts' routing (transformers'
eager experts pick the tokens of each expert with ``nonzero``; its default ``grouped_mm`` runs only
bf16 inputs on the CPU). Imports torch, transformers and (for LoRA) peft (for QLoRA bitsandbytes), off the fast path.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

from advisor.measure.autocast_ops import cuda_autocast_float32
from advisor.measure.timeline import MemoryTimeline
from advisor.measure.quantized_base import (cuda_autocast_answers, is_4bit, legacy_backward, missing_reason,
                                            quantize_skeleton, quantized_weight)
from advisor.measure.trainable import (apply_adapters, autocast_dtype, build_model, enable_checkpointing, hf_config,
                                       make_optimizer, synthetic_batch)
from advisor.core.dimensions import Consumer, refusal
from advisor.core.errors import UsageError
from probes.model import ModelProfile
from advisor.core.vocabulary import Device, Family, Method, Task
from rules import Plan


@dataclass
class SimulationResult:
    """Peak live bytes of the simulated steps and where they happened."""

    peak_bytes: int  #: most bytes held by live tensors (max_memory_allocated), bytes
    peak_phase: str  #: 'forward', 'backward' or 'optimizer'
    phase_peaks: dict[str, int]  #: peak per phase, bytes
    wall_s: float  #: seconds the simulation took
    build_bytes: int = 0  #: bytes live once the model (and its adapters) and the batch are built, bytes
    timeline: MemoryTimeline | None = None  #: every allocation and free by kind (:mod:`advisor.measure.timeline`)


def live_bytes_mode(record: bool = False):
    """A ``TorchDispatchMode`` counting live storage bytes, with the peak per phase (set ``.phase``); with ``record``,
    also every allocation and free in ``.timeline`` (:class:`~advisor.measure.timeline.MemoryTimeline`; ``.label``
    gives the storages of some tensors a kind), which grows with every step (a simulation's two, not a trial's)."""
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
            self.timeline = MemoryTimeline() if record else None
            self.recording = record  #: False once the run is over: what its end frees is not part of the step

        def _free(self, nbytes: int, index: int | None, _ref) -> None:
            self.current -= nbytes
            if index is not None and self.recording:
                self.timeline.free(index, self.phase)

        def track(self, t, op: str = "") -> None:
            st = t.untyped_storage()
            if st in self.storages:
                return
            nbytes = st.nbytes()
            index = self.timeline.allocate(nbytes, op, self.phase) if self.recording else None
            self.storages[st] = index
            self.refs.append(weakref.ref(st, lambda ref, n=nbytes, i=index: self._free(n, i, ref)))
            self.current += nbytes
            if self.current > self.phase_peaks.get(self.phase, 0):
                self.phase_peaks[self.phase] = self.current

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.track(t, str(func))
            return out

        def label(self, tensors, kind: str) -> None:
            """Give the storages of ``tensors`` (those tracked) the kind ``kind`` for their whole life."""
            for t in tensors if record else ():
                if isinstance(t, torch.Tensor) and (index := self.storages.get(t.untyped_storage())) is not None:
                    self.timeline.label(index, kind)

    return LiveBytes()


def _adapter_skeleton(model: ModelProfile, config, plan: Plan):
    """The model wrapped in the plan's LoRA adapters on the meta device (no memory), checkpointing enabled.

    PEFT moves each new adapter to its base layer's device with ``Module.to()``, which fake parameters refuse
    (torch swaps a fake parameter's tensor, and fake tensors carry weak references), so the adapters are made on
    the meta device, where PEFT skips the move, and :func:`materialize` turns the result into fake tensors."""
    import torch

    with torch.device("meta"):
        net = build_model(model, config, weights_dtype=plan.weights_dtype)
        if Method.of(plan.method).spec.quantized_base:
            quantize_skeleton(net, plan)
        if plan.gradient_checkpointing:
            enable_checkpointing(net)
        return apply_adapters(net, model, plan)


def materialize(net):
    """Replace every meta parameter and buffer of ``net`` by a new tensor of the same shape and dtype (a fake one
    under fake mode, as transformers would have built it there), tied weights kept tied; a 4-bit layer's weight
    by bitsandbytes' quantization of a fake matrix (:func:`advisor.measure.quantized_base.quantized_weight`)."""
    import torch

    made: dict[int, torch.Tensor] = {}
    for module in net.modules():
        if is_4bit(module):
            module._parameters["weight"] = quantized_weight(module)
        for name, param in list(module._parameters.items()):
            if param is not None and not (is_4bit(module) and name == "weight"):
                if id(param) not in made:
                    made[id(param)] = torch.nn.Parameter(torch.empty(param.shape, dtype=param.dtype),
                                                         requires_grad=param.requires_grad)
                module._parameters[name] = made[id(param)]
        for name, buffer in list(module._buffers.items()):
            if buffer is not None:
                module._buffers[name] = made.setdefault(id(buffer), torch.empty(buffer.shape, dtype=buffer.dtype))
    return net


def fake_model(model: ModelProfile, config, plan: Plan, skeleton=None):
    """The plan's model in training mode, built under the running ``FakeTensorMode``: ``skeleton`` (the adapters'
    :func:`_adapter_skeleton`, made before entering the mode) materialized, or the model with checkpointing enabled
    as the plan says."""
    if skeleton is not None:
        net = materialize(skeleton)
    else:
        net = build_model(model, config, weights_dtype=plan.weights_dtype)
        if plan.gradient_checkpointing:
            enable_checkpointing(net)
    net.train()
    return net


def unsupported(model: ModelProfile, plan: Plan) -> str | None:
    """Why ``--simulate`` cannot run ``plan`` (one line for the user), or None when it can."""
    refused = refusal(Consumer.SIMULATE, plan)  # the settings a simulated step cannot run (the table's rows)
    if refused is not None:
        return refused
    if Method.of(plan.method).spec.quantized_base and missing_reason() is not None:
        return f"--simulate cannot run {plan.method}: {missing_reason()}"
    if model.num_experts:
        return (f"--simulate cannot run the mixture of experts {model.model_type}: routing tokens to experts is "
                "data-dependent, which fake tensors cannot run; use the analytic estimate")
    if model.family == Family.ENCODER_DECODER and model.task in (Task.SEQUENCE_CLASSIFICATION, Task.QUESTION_ANSWERING):
        return (f"--simulate cannot run {model.model_type} with a {model.task} head: it checks each row's EOS tokens, "
                "which fake tensors cannot; use the analytic estimate")
    return None


def _optimizer(net, plan: Plan) -> tuple:
    """The plan's optimizer over the trainable parameters and a list of it, or, for the step in backward, None and
    one optimizer per parameter stepped by its post-accumulate-grad hook, which frees the gradient at once (PyTorch
    tutorial "How to save memory by fusing the optimizer step into the backward pass",
    https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html)."""
    params = [p for p in net.parameters() if p.requires_grad]
    if not plan.optimizer_in_backward:
        optimizer = make_optimizer(params, plan)
        return optimizer, [optimizer]
    per_param = {p: make_optimizer([p], plan) for p in params}

    def step(param) -> None:
        per_param[param].step()
        per_param[param].zero_grad(set_to_none=True)

    for p in params:
        p.register_post_accumulate_grad_hook(step)
    return None, list(per_param.values())


def _label_gradients(net, tracker) -> None:
    """Label each trainable parameter's accumulated gradient as gradients on the timeline (a post-accumulate-grad
    hook, registered before the step in backward's, which frees it)."""
    for p in net.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda param: tracker.label([param.grad], "gradients"))


def _label_states(optimizers, tracker) -> None:
    """Label the tensors of the optimizers' state as optimizer states on the timeline."""
    for optimizer in optimizers:
        for state in optimizer.state.values():
            tracker.label(state.values(), "optimizer_states")


def simulate(model: ModelProfile, plan: Plan, seq_len: int, steps: int = 2,
             config: dict | None = None) -> SimulationResult:
    """Run ``steps`` optimizer steps of ``plan`` on fake tensors and measure the live-bytes peak, with the timeline
    of every allocation by kind (:class:`~advisor.measure.timeline.MemoryTimeline`).

    ``config`` is the config.json dict (default: loaded again from the model's id or path).

    Accumulation runs at most 2 micro-batches per step: the peak repeats from the second on.
    Raises:
        UsageError: a plan the simulation cannot run (QLoRA without bitsandbytes, bitsandbytes' optimizers, ZeRO,
            several GPUs, a mixture of experts: :func:`unsupported`), or LoRA without peft.
    """
    reason = unsupported(model, plan)
    if reason is not None:
        raise UsageError(reason)
    import warnings

    import torch
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode

    start = time.perf_counter()
    transformers.logging.set_verbosity_error()  # its config notes are not advisor's diagnostics
    warnings.filterwarnings("ignore", module="torch.utils.checkpoint")
    config = hf_config(model, plan, config, zero_attention_dropout=plan.device == Device.CUDA, simulated=True)
    dtype = autocast_dtype(plan.precision)
    tracker = live_bytes_mode(record=True)
    skeleton = _adapter_skeleton(model, config, plan) if Method.of(plan.method).spec.adapters else None
    cuda_autocast = plan.device == Device.CUDA and dtype is not None
    legacy = Method.of(plan.method).spec.quantized_base and plan.legacy_bitsandbytes
    with (FakeTensorMode(allow_non_fake_inputs=True), tracker, cuda_autocast_answers(cuda_autocast),
          cuda_autocast_float32(cuda_autocast), legacy_backward(legacy)):
        net = fake_model(model, config, plan, skeleton)
        _label_gradients(net, tracker)
        optimizer, optimizers = _optimizer(net, plan)
        batch = synthetic_batch(model, config, plan.micro_batch_size, seq_len)
        tracker.label(batch.values(), "activations")  # the embedding and the loss keep the batch for backward
        built = tracker.current
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
            if optimizer is not None:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            _label_states(optimizers, tracker)
        tracker.recording = False  # the model, the batch and the states die with this function, after the steps
    peaks = {k: v for k, v in tracker.phase_peaks.items() if k != "build"}
    phase = max(peaks, key=peaks.get)
    return SimulationResult(peak_bytes=peaks[phase], peak_phase=phase, phase_peaks=peaks, build_bytes=built,
                            wall_s=time.perf_counter() - start, timeline=tracker.timeline)
