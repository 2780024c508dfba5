"""What each activation-checkpointing policy keeps and recomputes (:class:`advisor.core.kernels.Checkpointing`).

Full checkpointing keeps each block's input and recomputes the whole block in the backward: one more forward of
the blocks. Selective checkpointing as torchtitan runs it (``torchtitan/distributed/activation_checkpoint.py``;
Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198 sec. 5 for the idea of recomputing only the cheap part):

- op-level: inside each checkpointed block the outputs of attention and of the 1st, 3rd, 5th ... matmul
  (``aten.mm``) are saved and everything else recomputed. In a Llama block (q, k, v, o; gate, up, down) that keeps
  q, v, gate and down and recomputes k, o and up; in a GPT-2 block (fused qkv, out; fc, proj) it keeps qkv and fc;
- layer-level (``selective_ac_option = "2"``): every second block is checkpointed (fully), the others keep
  everything.

Not yet measured on a GPU by this project; the torchtitan runs of ``benchmarks/published`` price it.
"""

from __future__ import annotations

import math

from advisor.core.kernels import Checkpointing
from probes.model import ModelProfile
from advisor.core.plan import Plan


def _widths(model: ModelProfile) -> tuple[int, int, int, int]:
    """(hidden, attention inner width, key/value width, MLP width), elements per token."""
    inner = model.num_attention_heads * model.head_dim
    return model.hidden_size, inner, model.num_key_value_heads * model.head_dim, model.ffn_size


def _block_matmuls(model: ModelProfile) -> list[tuple[int, int]]:
    """The matmuls of one block in execution order, as (input width, output width) per token: separate q, k, v and
    a gated MLP (Llama and its kin), else a fused qkv and a plain MLP (GPT-2)."""
    h, inner, kv, f = _widths(model)
    if model.gated_mlp:
        return [(h, inner), (h, kv), (h, kv), (inner, h), (h, f), (h, f), (f, h)]
    return [(h, inner + 2 * kv), (inner, h), (h, f), (f, h)]


def selective_kept_bytes(model: ModelProfile, plan: Plan, seq_len: int, activation_bytes: int) -> int:
    """Bytes one block keeps under op-level selective checkpointing beyond its input, at the plan's micro-batch:
    attention's output and the outputs of the block's odd-numbered matmuls, ``activation_bytes`` each element."""
    kept = sum(out for i, (_, out) in enumerate(_block_matmuls(model)) if i % 2 == 0) + _widths(model)[1]
    return activation_bytes * plan.micro_batch_size * seq_len * kept


def checkpointed_blocks(plan: Plan, layers: float) -> float:
    """How many of ``layers`` blocks are checkpointed (the rest keep everything): all but under layer-level
    selective checkpointing, which checkpoints blocks 0, 2, 4 ... (``layer_id % 2 == 0``)."""
    if Checkpointing.of(plan.checkpointing) is Checkpointing.SELECTIVE_LAYER:
        return float(math.ceil(layers / 2))
    return layers


def recompute_shares(model: ModelProfile, plan: Plan) -> tuple[float, float]:
    """(share of the blocks' matmul FLOPs, share of attention's) that the backward computes again: 0 without
    checkpointing, 1 under full, the recomputed (even-numbered) matmuls' share and no attention under op-level
    selective, the checkpointed blocks' share under layer-level."""
    if not plan.gradient_checkpointing:
        return 0.0, 0.0
    policy = Checkpointing.of(plan.checkpointing)
    if policy is Checkpointing.SELECTIVE_OP:
        flops = [i * o for i, o in _block_matmuls(model)]
        return sum(f for k, f in enumerate(flops) if k % 2 == 1) / sum(flops), 0.0
    if policy is Checkpointing.SELECTIVE_LAYER:
        share = checkpointed_blocks(plan, model.num_layers) / max(model.num_layers, 1)
        return share, share
    return 1.0, 1.0
