"""QLoRA's 4-bit base: on fake tensors for the simulator (bitsandbytes' own layers and kernels, quantizing shapes,
not weights), and with random weights on a real device for a trial (:func:`random_quantized`).

The simulated QLoRA step (:mod:`advisor.measure.simulate`) builds what ``from_pretrained`` with the plan's
``BitsAndBytesConfig`` (:func:`probes.lora_config.bnb_config_kwargs`) builds on a GPU:

- transformers' bitsandbytes quantizer swaps every ``nn.Linear`` but the ones it keeps (the output embedding, tied
  and last modules: ``transformers.quantizers.base.get_keys_to_not_convert``) for ``bnb.nn.Linear4bit``
  (``HfQuantizer.preprocess_model``, on the meta device, as ``from_pretrained`` does before loading), and marks the
  model ``is_loaded_in_4bit`` so that PEFT wraps those layers in its own 4-bit LoRA layer
  (``peft/tuners/lora/bnb.py``);
- each 4-bit weight is made by ``bitsandbytes.functional.quantize_4bit`` from a fake 16-bit matrix: the packed NF4
  bytes (n / 2), the absmax per 64 weights, double-quantized to 8 bits with fp32 absmax per 256 of those
  (Dettmers et al. 2023, https://arxiv.org/abs/2305.14314 sec. 3), fake tensors of exactly bitsandbytes' shapes;
- forward and backward run bitsandbytes' ``matmul_4bit``: its ``MatMul4Bit`` keeps the packed weight, not its input,
  for backward (``ctx.tensors = (None, B)``, ``bitsandbytes/autograd/_functions.py``, since 0.43.2);
- a plan on an older bitsandbytes (``Plan.legacy_bitsandbytes``) runs :class:`_KeepsInput`, the same function keeping
  its input as those versions did (``ctx.tensors = (A, B)``: the line bitsandbytes PR 1270 changed,
  https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1270).

bitsandbytes (>= 0.46, PR 1544) registers its kernels as ``torch.library`` ops with fake implementations, which lets
them run under ``FakeTensorMode``; only the double quantization's 8-bit code book is data, made once for real
(:func:`code_book`). A trial without a checkpoint gets the same skeleton with each weight made and quantized on the
device by bitsandbytes (:func:`random_quantized`). Imports torch, transformers and bitsandbytes, off the fast path.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager

from advisor.core.errors import UsageError
from probes.lora_config import bnb_config_kwargs
from rules import Plan


def missing_reason() -> str | None:
    """Why the 4-bit base cannot be simulated here (one line), or None when bitsandbytes is installed."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return "QLoRA's 4-bit base needs the bitsandbytes package (>= 0.46): pip install bitsandbytes"
    return None


def quantize_skeleton(net, plan: Plan):
    """Swap ``net``'s linear layers for bitsandbytes' 4-bit ones in place, as transformers' quantizer does before
    ``from_pretrained`` loads weights (``net`` on the meta device); returns the quantizer (transformers'
    ``HfQuantizer``).

    Raises:
        UsageError: bitsandbytes is not installed.
    """
    reason = missing_reason()
    if reason is not None:
        raise UsageError(reason)
    import torch

    quantizer = quantizer_of(plan)
    quantizer.preprocess_model(net, device_map={"": "cpu"})
    net.is_loaded_in_4bit = True  # what the quantizer's post-processing sets once the weights are loaded
    with torch.device("cpu"):  # the skeleton is built under torch.device("meta")
        code_book()
    return quantizer


def random_quantized(auto, config, plan: Plan, device, dtype_kwargs: dict):
    """A model of ``auto`` (a transformers auto class) from ``config`` with random weights, its linear layers 4-bit
    as ``from_pretrained`` with the plan's ``BitsAndBytesConfig`` loads them, built on ``device`` a tensor at a time.

    The skeleton's parameters are made on the meta device and its buffers (rotary frequencies) for real
    (``accelerate.init_empty_weights(include_buffers=False)``; accelerate is a dependency of PEFT);
    :func:`quantize_skeleton` swaps in bitsandbytes' ``Linear4bit`` as transformers' quantizer does; then each
    4-bit weight is a normal matrix (std ``config.initializer_range``) quantized by ``Params4bit.to(device)``
    (bitsandbytes' own path) and freed, each other parameter a normal matrix (norm weights 1, biases 0) in the
    dtype ``from_pretrained`` gives it (``dtype_kwargs``: ``_dtype_kwargs`` of the plan's weights dtype; fp32
    without), tied parameters kept tied.

    Raises:
        UsageError: bitsandbytes is not installed.
    """
    import torch
    import bitsandbytes as bnb
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        net = auto.from_config(config, **dtype_kwargs)
    quantizer = quantize_skeleton(net, plan)
    net.tie_weights()  # on the skeleton, so a tied head is made once (the loop keeps shared parameters shared)
    dtype = next(iter(dtype_kwargs.values()), torch.float32)
    std = getattr(config, "initializer_range", 0.02)
    made: dict[int, torch.nn.Parameter] = {}  # id of a meta parameter -> its real one (tied weights stay tied)
    for module in net.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if id(param) in made or param.device.type != "meta":
                module._parameters[name] = made.get(id(param), param)
                continue
            if is_4bit(module) and name == "weight":
                matrix = torch.empty(param.shape, dtype=dtype, device=device)  # as a checkpoint in that dtype
                real = bnb.nn.Params4bit(
                    matrix.normal_(0.0, std),
                    requires_grad=False,
                    quant_type=param.quant_type,
                    compress_statistics=param.compress_statistics,
                    blocksize=param.blocksize,
                    quant_storage=param.quant_storage,
                    module=module,
                ).to(device)
            else:
                value = torch.empty(param.shape, dtype=dtype if is_4bit(module) else param.dtype, device=device)
                value = (
                    value.zero_()
                    if name == "bias"
                    else value.fill_(1.0)
                    if value.dim() == 1
                    else value.normal_(0.0, std)
                )
                # a loaded bias of a 4-bit layer is a fresh trainable parameter (the skeleton's is frozen)
                real = torch.nn.Parameter(value, requires_grad=param.requires_grad or is_4bit(module))
            made[id(param)] = module._parameters[name] = real
        for name, buffer in list(module.named_buffers(recurse=False)):
            module._buffers[name] = buffer.to(device)
    net.hf_quantizer = quantizer
    net.is_quantized = True
    return net


def quantizer_of(plan: Plan):
    """transformers' bitsandbytes 4-bit quantizer for the plan's ``BitsAndBytesConfig``."""
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.auto import AutoHfQuantizer

    config = BitsAndBytesConfig(**bnb_config_kwargs(plan.precision, double_quant=plan.double_quant))
    return AutoHfQuantizer.from_config(config, pre_quantized=False)


def is_4bit(module) -> bool:
    """Whether ``module`` is a bitsandbytes 4-bit linear layer (False when bitsandbytes is not imported)."""
    import sys

    bnb = sys.modules.get("bitsandbytes")
    return bnb is not None and isinstance(module, bnb.nn.Linear4bit)


def code_book() -> None:
    """Make the double quantization's dynamic 8-bit map once, for real: bitsandbytes builds it from Python lists
    (``create_dynamic_map``), which fake tensors cannot read back, and caches it in ``name2qmap``."""
    import bitsandbytes.functional as bnbf

    if "dynamic" not in bnbf.name2qmap:
        bnbf.name2qmap["dynamic"] = bnbf.create_dynamic_map()


def quantized_weight(module):
    """A 4-bit weight for the ``bnb.nn.Linear4bit`` ``module``: bitsandbytes' packed NF4 parameter with its
    ``quant_state`` (call under ``FakeTensorMode``: the 16-bit matrix it quantizes is fake, and freed at once)."""
    import torch
    import bitsandbytes.functional as bnbf

    meta = module.weight
    storage = getattr(meta, "quant_storage", torch.uint8)
    matrix = torch.empty(module.out_features, module.in_features, dtype=module.compute_dtype or torch.bfloat16)
    packed, state = bnbf.quantize_4bit(
        matrix,
        blocksize=getattr(meta, "blocksize", 64),
        compress_statistics=meta.compress_statistics,
        quant_type=meta.quant_type,
        quant_storage=storage,
    )
    weight = torch.nn.Parameter(packed, requires_grad=False)
    weight.quant_state = state  # where Linear4bit.forward reads it (bitsandbytes' fix_4bit_weight_quant_state...)
    return weight


@contextmanager
def cuda_autocast_answers(enabled: bool):
    """PEFT's 4-bit LoRA layer casts its input to the adapters' dtype only when ``torch.is_autocast_enabled()`` (CUDA
    autocast) is off (``requires_conversion`` in ``peft/tuners/lora/bnb.py``); a simulated CUDA step runs CPU autocast
    in its place, so within this context that question gets CPU autocast's answer when ``enabled``."""
    import torch

    if not enabled:
        yield
        return
    original = torch.is_autocast_enabled

    def answer(device_type: str | None = None) -> bool:
        return original("cpu") if device_type is None else original(device_type)

    torch.is_autocast_enabled = answer
    try:
        yield
    finally:
        torch.is_autocast_enabled = original


@contextmanager
def legacy_backward(enabled: bool):
    """Within this context (when ``enabled``), bitsandbytes' ``matmul_4bit`` runs ``MatMul4Bit`` as bitsandbytes
    < 0.43.2 did: keeping its input ``A`` for backward whenever an input requires grad (``ctx.tensors = (A, B)``), which
    PR 1270 replaced by ``(None, B)`` since backward needs only the weight."""
    if not enabled:
        yield
        return
    import bitsandbytes.autograd._functions as functions

    original = functions.MatMul4Bit

    class _KeepsInput(original):
        @staticmethod
        def forward(ctx, A, B, out=None, bias=None, quant_state=None):
            output = original.forward(ctx, A, B, out, bias, quant_state)
            if any(ctx.needs_input_grad[:2]):
                ctx.tensors = (A, ctx.tensors[1])
            return output

    functions.MatMul4Bit = _KeepsInput
    try:
        yield
    finally:
        functions.MatMul4Bit = original
