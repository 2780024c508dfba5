"""Parameter tensors and shape facts of a model, as the closed-form builders and the meta-device count
produce them (no torch): :class:`ParamGroup`, :class:`Shape` and the helpers that make groups.

A tied input/output embedding is one tensor (counted once) used by two matmuls. Mixture-of-experts
models keep every expert in memory (the totals) but run only ``experts_per_token`` of the
``num_experts`` routed experts per token (the active counts; Shazeer et al. 2017,
https://arxiv.org/abs/1701.06538 sec. 2; Fedus et al. 2021, https://arxiv.org/abs/2101.03961 sec. 2.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from advisor.core.vocabulary import Family, Task, literal

TaskName = literal(Task)  #: a task head's name (values: :class:`advisor.core.vocabulary.Task`)
FamilyName = literal(Family)  #: an architecture family's name (values: :class:`advisor.core.vocabulary.Family`)


@dataclass(frozen=True)
class ParamGroup:
    """``count`` parameter tensors of one ``shape``.

    ``matmul`` marks weights used as a matrix multiply per token (2 FLOP per element per token
    forward). A tied embedding is a matmul (the LM head) but its lookup is not, so it counts once.
    ``routed`` marks routed experts' weights: per token only ``experts_per_token`` of the
    ``num_experts`` experts they hold take part (see :attr:`Shape.active_parameters`).
    """

    name: str
    shape: tuple[int, ...]
    count: int = 1
    matmul: bool = False
    routed: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * self.count


@dataclass
class Shape:
    """Shape facts of one model with one task head (all sizes in elements)."""

    family: FamilyName
    layers: int  #: transformer blocks in all stacks (encoder + decoder)
    encoder_layers: int
    decoder_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    max_positions: int | None
    gated_mlp: bool
    tied_embeddings: bool
    groups: list[ParamGroup] = field(default_factory=list)
    num_experts: int = 0  #: routed experts per MoE block (0: dense)
    experts_per_token: int = 0  #: routed experts each token runs through, top-k (0: dense)
    shared_experts: int = 0  #: always-active experts per MoE block
    moe_layers: int = 0  #: blocks whose MLP is a mixture of experts
    capacity_factor: float | None = None  #: expert capacity / (tokens·k / experts); None: dropless

    @property
    def num_parameters(self) -> int:
        return sum(g.numel for g in self.groups)

    @property
    def matmul_parameters(self) -> int:
        """Parameters that take part in a matmul (the N of 6·N·T FLOPs of a dense model), every expert."""
        return sum(g.numel for g in self.groups if g.matmul)

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses: all but the routed experts it is not sent to."""
        return self._active(lambda g: True)

    @property
    def active_matmul_parameters(self) -> int:
        """Matmul parameters one token uses (the N of 6·N·T FLOPs for a MoE), routers included."""
        return self._active(lambda g: g.matmul)

    def _active(self, keep: Callable[[ParamGroup], bool]) -> int:
        total = sum(g.numel for g in self.groups if keep(g))
        routed = sum(g.numel for g in self.groups if keep(g) and g.routed)
        if not routed or not self.num_experts:
            return total
        # every routed expert has the same shapes, so routed · k / E is exact
        return total - routed + routed * self.experts_per_token // self.num_experts


def linear(name: str, fan_in: int, fan_out: int, count: int = 1, bias: bool = True) -> list[ParamGroup]:
    """``count`` ``nn.Linear`` layers: a (fan_out, fan_in) matmul weight and a (fan_out,) bias, in elements."""
    groups = [ParamGroup(f"{name}.weight", (fan_out, fan_in), count, matmul=True)]
    if bias:
        groups.append(ParamGroup(f"{name}.bias", (fan_out,), count))
    return groups


def norm(name: str, dim: int, count: int = 1, bias: bool = True) -> list[ParamGroup]:
    """``count`` LayerNorm / RMSNorm layers: a (dim,) weight and, for LayerNorm, a (dim,) bias."""
    groups = [ParamGroup(f"{name}.weight", (dim,), count)]
    if bias:
        groups.append(ParamGroup(f"{name}.bias", (dim,), count))
    return groups


def tied_head(groups: list[ParamGroup], embedding_name: str) -> list[ParamGroup]:
    """Mark the input embedding as also used as the (tied) LM-head matmul."""
    return [ParamGroup(g.name, g.shape, g.count, matmul=True) if g.name == embedding_name else g for g in groups]


def task_head(task: TaskName, hidden: int, num_labels: int, seq_cls_bias: bool) -> list[ParamGroup]:
    """The generic classification (``score``) or question-answering (``qa_outputs``) head; none for an LM."""
    if task == Task.SEQUENCE_CLASSIFICATION:
        return linear("score", hidden, num_labels, bias=seq_cls_bias)
    if task == Task.QUESTION_ANSWERING:
        return linear("qa_outputs", hidden, 2)
    return []


def capacity_factor(cfg: dict) -> float | None:
    """The config's expert capacity factor (Switch Transformers' C: each expert takes at most C·tokens·k/E
    tokens and the rest are dropped or padded to that size; Fedus et al. 2021, https://arxiv.org/abs/2101.03961
    sec. 2.2). None when the config names none: the MoEs of transformers (Mixtral, Qwen-MoE, DeepSeek) are
    dropless and run exactly the k chosen experts per token; transformers' Switch Transformers caps each expert
    at an absolute ``expert_capacity`` tokens per sequence and runs only the tokens kept (no padding), so it
    has no factor either."""
    value = cfg.get("capacity_factor")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
