"""CUDA autocast's float32 ops, for a simulated CUDA step that runs CPU autocast.

A simulated step runs on fake CPU tensors (:mod:`advisor.measure.simulate`), so its mixed precision is CPU autocast.
CPU and CUDA autocast cast the same ops to 16 bits (matmuls, linear layers), but not the same ops to float32: CUDA
autocast runs ``layer_norm``, ``softmax``, ``log_softmax``, ``pow``, ``exp``, ``rsqrt``, ``sum`` and the losses in
float32, casting 16-bit inputs up, where CPU autocast leaves them in 16 bits (PyTorch docs, "Automatic Mixed
Precision package - torch.amp", "Autocast Op Reference": "CUDA Ops that can autocast to float32" against "CPU Ops
that can autocast to float32", https://pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float32).
A model whose code does not upcast these itself (GPT-2's LayerNorm and tanh GELU, BERT's LayerNorm and eager
softmax) keeps float32 activations on a GPU that a CPU-autocast step keeps in 16 bits: the first H100 records
(``benchmarks/results/validate_h100-sxm.jsonl``) measured gpt2 at micro-batch 31 × 1024 at 44.72 GiB
(``max_memory_allocated``), which the step simulated with CPU autocast put at 38.23 and with these casts at 44.77.
Models that upcast in their own code (Llama's RMSNorm, eager attention's float32 softmax) are unchanged.

:func:`cuda_autocast_float32` wraps the Python entry points of those ops (``torch.X``, ``torch.Tensor.X``,
``torch.nn.functional.X``) for the length of a simulated step, so that while CPU autocast is on (the forward pass, and
a checkpointed block's recomputation, which restores it) they cast 16-bit floating inputs to float32 as CUDA autocast
does; an op called with an explicit ``dtype=`` is not eligible (the same reference, "Op Eligibility"). A
``TorchFunctionMode`` would not do: it is off while it handles a call, so the recomputation inside
``Tensor.backward`` would run without it. Ops that C++ composites call inside are not seen. The wrapping is
process-wide: a CPU plan simulated at the same time in another thread would see it too (advisor runs one at a time).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

#: The reference's "CUDA Ops that can autocast to float32" (torch 2.x), by the Python name of the torch function,
#: ``torch.Tensor`` method or ``torch.nn.functional`` function; in-place variants are not eligible.
CUDA_FLOAT32_OPS = frozenset(
    {
        "__pow__",
        "__rdiv__",
        "__rpow__",
        "__rtruediv__",
        "acos",
        "asin",
        "binary_cross_entropy_with_logits",
        "cosh",
        "cosine_embedding_loss",
        "cdist",
        "cosine_similarity",
        "cross_entropy",
        "cumprod",
        "cumsum",
        "dist",
        "erfinv",
        "exp",
        "expm1",
        "group_norm",
        "hinge_embedding_loss",
        "kl_div",
        "l1_loss",
        "layer_norm",
        "log",
        "log_softmax",
        "log10",
        "log1p",
        "log2",
        "margin_ranking_loss",
        "mse_loss",
        "multilabel_margin_loss",
        "multi_margin_loss",
        "nll_loss",
        "norm",
        "normalize",
        "pdist",
        "poisson_nll_loss",
        "pow",
        "prod",
        "reciprocal",
        "rsqrt",
        "sinh",
        "smooth_l1_loss",
        "soft_margin_loss",
        "softmax",
        "softmin",
        "softplus",
        "sum",
        "renorm",
        "tan",
        "triplet_margin_loss",
    }
)


@contextlib.contextmanager
def cuda_autocast_float32(enabled: bool) -> Iterator[None]:
    """Within it, the ops of :data:`CUDA_FLOAT32_OPS` run in float32 under CPU autocast, as on CUDA (nothing changes
    when ``enabled`` is False: a CPU plan, or no mixed precision). Imports torch."""
    if not enabled:
        yield
        return
    import torch

    low = (torch.float16, torch.bfloat16)

    def up(value):
        return value.float() if isinstance(value, torch.Tensor) and value.dtype in low else value

    def wrap(original):
        @functools.wraps(original)
        def float32_under_autocast(*args, **kwargs):
            if kwargs.get("dtype") is None and torch.is_autocast_enabled("cpu"):
                args = tuple(up(a) for a in args)
                kwargs = {k: up(v) for k, v in kwargs.items()}
            return original(*args, **kwargs)

        return float32_under_autocast

    saved = [
        (owner, name, getattr(owner, name))
        for owner in (torch, torch.Tensor, torch.nn.functional)
        for name in CUDA_FLOAT32_OPS
        if hasattr(owner, name)
    ]
    try:
        for owner, name, original in saved:
            setattr(owner, name, wrap(original))
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
