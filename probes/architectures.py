"""Closed-form shapes of the catalog families: every parameter tensor, without torch.

For each supported ``model_type`` a builder turns a config dict into the list of parameter
tensors (:class:`ParamGroup`) that transformers creates for a task head, and the shape facts
(:class:`Shape`) the memory and speed models need. The parameter count is the sum of the
groups; a test checks it equals what transformers counts on the meta device for every catalog
model. Tied input/output embeddings are one tensor (counted once) used by two matmuls.

Sources: the transformers modelling files (``modeling_gpt2.py``, ``modeling_bert.py``,
``modeling_roberta.py``, ``modeling_distilbert.py``, ``modeling_t5.py``, ``modeling_opt.py``,
``modeling_llama.py``, ``modeling_mistral.py``), https://github.com/huggingface/transformers/tree/main/src/transformers/models
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from probes.vocabulary import Family, Task, literal

TaskName = literal(Task)  #: a task head's name (values: :class:`probes.vocabulary.Task`)
FamilyName = literal(Family)  #: an architecture family's name (values: :class:`probes.vocabulary.Family`)


@dataclass(frozen=True)
class ParamGroup:
    """``count`` parameter tensors of one ``shape``.

    ``matmul`` marks weights used as a matrix multiply per token (2 FLOP per element per token
    forward). A tied embedding is a matmul (the LM head) but its lookup is not, so it counts once.
    """

    name: str
    shape: tuple[int, ...]
    count: int = 1
    matmul: bool = False

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

    @property
    def num_parameters(self) -> int:
        return sum(g.numel for g in self.groups)

    @property
    def matmul_parameters(self) -> int:
        """Parameters that take part in a matmul per token (the N of 6·N·T FLOPs)."""
        return sum(g.numel for g in self.groups if g.matmul)


def _linear(name: str, fan_in: int, fan_out: int, count: int = 1, bias: bool = True) -> list[ParamGroup]:
    groups = [ParamGroup(f"{name}.weight", (fan_out, fan_in), count, matmul=True)]
    if bias:
        groups.append(ParamGroup(f"{name}.bias", (fan_out,), count))
    return groups


def _norm(name: str, dim: int, count: int = 1, bias: bool = True) -> list[ParamGroup]:
    groups = [ParamGroup(f"{name}.weight", (dim,), count)]
    if bias:
        groups.append(ParamGroup(f"{name}.bias", (dim,), count))
    return groups


def _tied_head(groups: list[ParamGroup], embedding_name: str) -> list[ParamGroup]:
    """Mark the input embedding as also used as the (tied) LM-head matmul."""
    return [ParamGroup(g.name, g.shape, g.count, matmul=True) if g.name == embedding_name else g for g in groups]


def _head(task: TaskName, hidden: int, num_labels: int, seq_cls_bias: bool) -> list[ParamGroup]:
    if task == Task.SEQUENCE_CLASSIFICATION:
        return _linear("score", hidden, num_labels, bias=seq_cls_bias)
    if task == Task.QUESTION_ANSWERING:
        return _linear("qa_outputs", hidden, 2)
    return []


def gpt2(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    h, n_layer = cfg.get("n_embd", 768), cfg.get("n_layer", 12)
    inner = cfg.get("n_inner") or 4 * h
    vocab, pos = cfg.get("vocab_size", 50257), cfg.get("n_positions", 1024)
    groups = [ParamGroup("wte.weight", (vocab, h)), ParamGroup("wpe.weight", (pos, h))]
    groups += _norm("h.ln_1", h, n_layer) + _linear("h.attn.c_attn", h, 3 * h, n_layer)
    groups += _linear("h.attn.c_proj", h, h, n_layer) + _norm("h.ln_2", h, n_layer)
    groups += _linear("h.mlp.c_fc", h, inner, n_layer) + _linear("h.mlp.c_proj", inner, h, n_layer)
    groups += _norm("ln_f", h)
    if task == Task.CAUSAL_LM:
        groups = _tied_head(groups, "wte.weight")
    groups += _head(task, h, num_labels, seq_cls_bias=False)
    heads = cfg.get("n_head", 12)
    return Shape(Family.DECODER_ONLY, n_layer, 0, n_layer, h, heads, heads, h // heads, inner, vocab, pos,
                 False, True, groups)


def _bert_like(cfg: dict, task: TaskName, num_labels: int, *, roberta: bool) -> Shape:
    h, n_layer = cfg.get("hidden_size", 768), cfg.get("num_hidden_layers", 12)
    ffn, vocab = cfg.get("intermediate_size", 3072), cfg.get("vocab_size", 30522)
    pos, types = cfg.get("max_position_embeddings", 512), cfg.get("type_vocab_size", 2)
    groups = [ParamGroup("embeddings.word_embeddings.weight", (vocab, h)),
              ParamGroup("embeddings.position_embeddings.weight", (pos, h)),
              ParamGroup("embeddings.token_type_embeddings.weight", (types, h))]
    groups += _norm("embeddings.LayerNorm", h)
    groups += _linear("layer.attention.qkv", h, h, 3 * n_layer) + _linear("layer.attention.output.dense", h, h, n_layer)
    groups += _norm("layer.attention.output.LayerNorm", h, n_layer)
    groups += _linear("layer.intermediate.dense", h, ffn, n_layer) + _linear("layer.output.dense", ffn, h, n_layer)
    groups += _norm("layer.output.LayerNorm", h, n_layer)
    if task in (Task.MASKED_LM, Task.CAUSAL_LM):
        groups = _tied_head(groups, "embeddings.word_embeddings.weight")
        groups += _linear("lm_head.transform.dense", h, h) + _norm("lm_head.transform.LayerNorm", h)
        groups += [ParamGroup("lm_head.decoder.bias", (vocab,))]
    elif task == Task.SEQUENCE_CLASSIFICATION:
        if roberta:  # RobertaClassificationHead: dense + out_proj, no pooler
            groups += _linear("classifier.dense", h, h) + _linear("classifier.out_proj", h, num_labels)
        else:  # BertPooler + classifier
            groups += _linear("pooler.dense", h, h) + _linear("classifier", h, num_labels)
    else:
        groups += _head(task, h, num_labels, seq_cls_bias=True)
    heads = cfg.get("num_attention_heads", 12)
    return Shape(Family.ENCODER_ONLY, n_layer, n_layer, 0, h, heads, heads, h // heads, ffn, vocab, pos,
                 False, True, groups)


def bert(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    return _bert_like(cfg, task, num_labels, roberta=False)


def roberta(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    return _bert_like(cfg, task, num_labels, roberta=True)


def distilbert(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    h, n_layer = cfg.get("dim", 768), cfg.get("n_layers", 6)
    ffn, vocab, pos = cfg.get("hidden_dim", 3072), cfg.get("vocab_size", 30522), cfg.get("max_position_embeddings", 512)
    groups = [ParamGroup("embeddings.word_embeddings.weight", (vocab, h)),
              ParamGroup("embeddings.position_embeddings.weight", (pos, h))]
    groups += _norm("embeddings.LayerNorm", h)
    groups += _linear("layer.attention.qkvo", h, h, 4 * n_layer) + _norm("layer.sa_layer_norm", h, n_layer)
    groups += _linear("layer.ffn.lin1", h, ffn, n_layer) + _linear("layer.ffn.lin2", ffn, h, n_layer)
    groups += _norm("layer.output_layer_norm", h, n_layer)
    if task == Task.MASKED_LM:
        groups = _tied_head(groups, "embeddings.word_embeddings.weight")
        groups += _linear("vocab_transform", h, h) + _norm("vocab_layer_norm", h)
        groups += [ParamGroup("vocab_projector.bias", (vocab,))]
    elif task == Task.SEQUENCE_CLASSIFICATION:
        groups += _linear("pre_classifier", h, h) + _linear("classifier", h, num_labels)
    else:
        groups += _head(task, h, num_labels, seq_cls_bias=True)
    heads = cfg.get("n_heads", 12)
    return Shape(Family.ENCODER_ONLY, n_layer, n_layer, 0, h, heads, heads, h // heads, ffn, vocab, pos,
                 False, True, groups)


def t5(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    d, d_kv, heads = cfg.get("d_model", 512), cfg.get("d_kv", 64), cfg.get("num_heads", 8)
    ffn, vocab = cfg.get("d_ff", 2048), cfg.get("vocab_size", 32128)
    enc = cfg.get("num_layers", 6)
    dec = cfg.get("num_decoder_layers") or enc
    buckets = cfg.get("relative_attention_num_buckets", 32)
    gated = str(cfg.get("feed_forward_proj", "relu")).startswith("gated")
    inner = heads * d_kv
    tied = cfg.get("tie_word_embeddings", True)

    def ff(prefix: str, n: int) -> list[ParamGroup]:
        wi = _linear(f"{prefix}.wi", d, ffn, n * (2 if gated else 1), bias=False)
        return wi + _linear(f"{prefix}.wo", ffn, d, n, bias=False)

    def attn(prefix: str, n: int) -> list[ParamGroup]:
        return _linear(f"{prefix}.qkv", d, inner, 3 * n, bias=False) + _linear(f"{prefix}.o", inner, d, n, bias=False)

    groups = [ParamGroup("shared.weight", (vocab, d))]
    groups += attn("encoder.self", enc) + [ParamGroup("encoder.relative_attention_bias", (buckets, heads))]
    groups += _norm("encoder.layer_norm", d, 2 * enc + 1, bias=False) + ff("encoder.ff", enc)
    groups += attn("decoder.self", dec) + [ParamGroup("decoder.relative_attention_bias", (buckets, heads))]
    groups += attn("decoder.cross", dec) + _norm("decoder.layer_norm", d, 3 * dec + 1, bias=False)
    groups += ff("decoder.ff", dec)
    if task == Task.SEQ2SEQ_LM:
        if tied:
            groups = _tied_head(groups, "shared.weight")
        else:
            groups += _linear("lm_head", d, vocab, bias=False)
    elif task == Task.SEQUENCE_CLASSIFICATION:
        groups += _linear("classification_head.dense", d, d) + _linear("classification_head.out_proj", d, num_labels)
    elif task == Task.QUESTION_ANSWERING:
        groups += _linear("qa_outputs", d, 2)
    return Shape(Family.ENCODER_DECODER, enc + dec, enc, dec, d, heads, heads, d_kv, ffn, vocab,
                 cfg.get("n_positions"), gated, tied, groups)


def opt(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    h, n_layer = cfg.get("hidden_size", 768), cfg.get("num_hidden_layers", 12)
    ffn, vocab = cfg.get("ffn_dim", 3072), cfg.get("vocab_size", 50272)
    pos, wep = cfg.get("max_position_embeddings", 2048), cfg.get("word_embed_proj_dim") or h
    bias = cfg.get("enable_bias", True)
    groups = [ParamGroup("embed_tokens.weight", (vocab, wep)), ParamGroup("embed_positions.weight", (pos + 2, h))]
    if wep != h:
        groups += _linear("project_in", wep, h, bias=False) + _linear("project_out", h, wep, bias=False)
    if cfg.get("do_layer_norm_before", True) and not cfg.get("_remove_final_layer_norm", False):
        groups += _norm("final_layer_norm", h)
    groups += _linear("layers.self_attn.qkvo", h, h, 4 * n_layer, bias=bias)
    groups += _norm("layers.self_attn_layer_norm", h, n_layer)
    groups += _linear("layers.fc1", h, ffn, n_layer, bias=bias) + _linear("layers.fc2", ffn, h, n_layer, bias=bias)
    groups += _norm("layers.final_layer_norm", h, n_layer)
    if task == Task.CAUSAL_LM:
        groups = _tied_head(groups, "embed_tokens.weight")
    groups += _head(task, wep, num_labels, seq_cls_bias=False)
    heads = cfg.get("num_attention_heads", 12)
    return Shape(Family.DECODER_ONLY, n_layer, 0, n_layer, h, heads, heads, h // heads, ffn, vocab, pos,
                 False, True, groups)


def llama(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Llama and Mistral (same parameter layout: GQA attention, SwiGLU MLP, RMSNorm)."""
    h, n_layer = cfg.get("hidden_size", 4096), cfg.get("num_hidden_layers", 32)
    heads = cfg.get("num_attention_heads", 32)
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    ffn, vocab = cfg.get("intermediate_size", 11008), cfg.get("vocab_size", 32000)
    attn_bias, mlp_bias = cfg.get("attention_bias", False), cfg.get("mlp_bias", False)
    tied = cfg.get("tie_word_embeddings", False)
    groups = [ParamGroup("embed_tokens.weight", (vocab, h))]
    groups += _linear("layers.self_attn.q_proj", h, heads * hd, n_layer, bias=attn_bias)
    groups += _linear("layers.self_attn.kv_proj", h, kv * hd, 2 * n_layer, bias=attn_bias)
    groups += _linear("layers.self_attn.o_proj", heads * hd, h, n_layer, bias=attn_bias)
    groups += _linear("layers.mlp.gate_up_proj", h, ffn, 2 * n_layer, bias=mlp_bias)
    groups += _linear("layers.mlp.down_proj", ffn, h, n_layer, bias=mlp_bias)
    groups += _norm("layers.norms", h, 2 * n_layer, bias=False) + _norm("norm", h, bias=False)
    if task == Task.CAUSAL_LM:
        groups = _tied_head(groups, "embed_tokens.weight") if tied else groups + _linear("lm_head", h, vocab, bias=False)
    groups += _head(task, h, num_labels, seq_cls_bias=False)
    return Shape(Family.DECODER_ONLY, n_layer, 0, n_layer, h, heads, kv, hd, ffn, vocab,
                 cfg.get("max_position_embeddings"), True, tied, groups)


#: model_type → builder. Anything else falls back to transformers on the meta device.
BUILDERS: dict[str, Callable[[dict, TaskName, int], Shape]] = {
    "gpt2": gpt2, "bert": bert, "roberta": roberta, "distilbert": distilbert, "t5": t5,
    "opt": opt, "llama": llama, "mistral": llama,
}

#: model_type → family, for the closed-form builders.
FAMILIES: dict[str, FamilyName] = {
    "gpt2": Family.DECODER_ONLY, "opt": Family.DECODER_ONLY, "llama": Family.DECODER_ONLY, "mistral": Family.DECODER_ONLY,
    "bert": Family.ENCODER_ONLY, "roberta": Family.ENCODER_ONLY, "distilbert": Family.ENCODER_ONLY, "t5": Family.ENCODER_DECODER,
}

