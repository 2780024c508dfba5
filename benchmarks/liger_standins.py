"""Stand-ins for Liger-Kernel's fused kernels that read and write what each kernel reads and writes, so that a Liger
step's memory traffic can be counted on fake tensors (``benchmarks/calibrate_traffic.py``), where Liger's Triton
kernels cannot run.

Each kernel becomes one autograd function whose forward and backward run one aten op over the tensors the kernel
moves through HBM (Liger-Kernel, https://github.com/linkedin/Liger-Kernel, ``src/liger_kernel/ops``; Hsu et al. 2024,
https://arxiv.org/abs/2410.10989 sec. 3):

- RMSNorm (``rms_norm.py``): forward reads X and W, writes Y (and 1/rms, one float a row); backward reads dY and X,
  writes dX (W's gradient: per-program partial rows, a few KB);
- SwiGLU / GeGLU (``swiglu.py``, ``geglu.py``): forward reads the gate and up projections, writes their product;
  backward reads dC and both inputs, writes both gradients (in place; the stand-in reads dC twice, one s·b·ffn read
  too many);
- RoPE (``rope.py``): forward and backward read q and k (and the small cos / sin tables) and write them in place.

The fused linear cross-entropy never materialises the logits: each chunk's logits are a matmul's output, which the
cross-entropy kernel reads and overwrites with their gradient in the forward (``fused_linear_cross_entropy.py``):
:data:`advisor.engine.traffic.FLCE_BYTES_PER_LOGIT` a logit, nothing in the backward. The stand-ins leave the loss as
it is, so the counted column is Liger's layers with the model's own loss (``--loss-kernel liger-layers``); the
engine puts the fused loss's bytes in place of the head's s·b·v terms under ``--loss-kernel liger``.
"""

from __future__ import annotations

import contextlib
import importlib

#: family (benchmarks/calibrate_activations.py) → (transformers module, class-name prefix) of the model types whose
#: norm, rotary function and gated MLP Liger replaces and whose classes follow Llama's layout (gate, up and down
#: projections; ``apply_rotary_pos_emb``). Phi-3's fused gate_up projection is left to the activation-ratio estimate
#: (advisor.engine.traffic).
LIGER_FAMILIES = {
    "llama": ("llama", "Llama"),
    "mistral": ("mistral", "Mistral"),
    "qwen2": ("qwen2", "Qwen2"),
    "qwen3": ("qwen3", "Qwen3"),
    "gemma": ("gemma", "Gemma"),
}


def _functions():
    import torch

    class Norm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x)
            return x * weight  # reads X and W, writes Y

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad + x, None  # reads dY and X, writes dX

    class GatedProduct(torch.autograd.Function):
        @staticmethod
        def forward(ctx, gate, up):
            ctx.save_for_backward(gate, up)
            return gate * up  # reads both projections, writes the product

        @staticmethod
        def backward(ctx, grad):
            gate, up = ctx.saved_tensors
            return grad * up, grad * gate  # reads dC and both inputs, writes both gradients

    class Rotary(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k):
            return q * 1, k * 1  # reads and writes q and k

        @staticmethod
        def backward(ctx, grad_q, grad_k):
            return grad_q * 1, grad_k * 1

    return Norm, GatedProduct, Rotary


@contextlib.contextmanager
def liger_standins(family: str):
    """Within the block, the family's transformers model runs the stand-ins in place of its RMSNorm, rotary function and
    gated MLP's activation (as ``liger_kernel.transformers.apply_liger_kernel_to_<model>`` patches the module)."""
    name, prefix = LIGER_FAMILIES[family]
    module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    norm_cls, mlp_cls = getattr(module, f"{prefix}RMSNorm"), getattr(module, f"{prefix}MLP")
    saved = (norm_cls.forward, module.apply_rotary_pos_emb, mlp_cls.forward)
    Norm, GatedProduct, Rotary = _functions()
    norm_cls.forward = lambda self, x: Norm.apply(x, self.weight)
    module.apply_rotary_pos_emb = lambda q, k, cos, sin, *args, **kwargs: Rotary.apply(q, k)
    mlp_cls.forward = lambda self, x: self.down_proj(GatedProduct.apply(self.gate_proj(x), self.up_proj(x)))
    try:
        yield
    finally:
        norm_cls.forward, module.apply_rotary_pos_emb, mlp_cls.forward = saved
