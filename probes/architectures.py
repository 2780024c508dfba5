"""Closed-form shapes of the catalog families: every parameter tensor, without torch.

For each supported ``model_type`` a builder turns a config dict into the list of parameter
tensors (:class:`ParamGroup`) that transformers creates for a task head, and the shape facts
(:class:`Shape`) the memory and speed models need. The parameter count is the sum of the
groups; a test checks it equals what transformers counts on the meta device for every catalog
model. Tied input/output embeddings are one tensor (counted once) used by two matmuls.

The Llama-layout decoders (Llama, Mistral, Qwen2, Qwen3, Gemma, Phi-3, Mixtral, the Qwen MoEs) are in :mod:`probes.decoders`; the
tensor and shape types in :mod:`probes.shapes`.

Sources: the transformers modelling files (``modeling_gpt2.py``, ``modeling_bert.py``,
``modeling_roberta.py``, ``modeling_distilbert.py``, ``modeling_t5.py``, ``modeling_opt.py``,
transformers 5.23), https://github.com/huggingface/transformers/tree/main/src/transformers/models
"""

from __future__ import annotations

from typing import Callable

from probes.decoders import gemma, gemma2, gemma3_text, llama, mixtral, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe
from probes.shapes import FamilyName, ParamGroup, Shape, TaskName, linear, norm, task_head, tied_head
from advisor.core.vocabulary import Family, Task


def gpt2(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    h, n_layer = cfg.get("n_embd", 768), cfg.get("n_layer", 12)
    inner = cfg.get("n_inner") or 4 * h
    vocab, pos = cfg.get("vocab_size", 50257), cfg.get("n_positions", 1024)
    groups = [ParamGroup("wte.weight", (vocab, h)), ParamGroup("wpe.weight", (pos, h))]
    groups += norm("h.ln_1", h, n_layer) + linear("h.attn.c_attn", h, 3 * h, n_layer)
    groups += linear("h.attn.c_proj", h, h, n_layer) + norm("h.ln_2", h, n_layer)
    groups += linear("h.mlp.c_fc", h, inner, n_layer) + linear("h.mlp.c_proj", inner, h, n_layer)
    groups += norm("ln_f", h)
    if task == Task.CAUSAL_LM:
        groups = tied_head(groups, "wte.weight")
    groups += task_head(task, h, num_labels, seq_cls_bias=False)
    heads = cfg.get("n_head", 12)
    return Shape(
        Family.DECODER_ONLY, n_layer, 0, n_layer, h, heads, heads, h // heads, inner, vocab, pos, False, True, groups
    )


def _bert_like(cfg: dict, task: TaskName, num_labels: int, *, roberta: bool) -> Shape:
    h, n_layer = cfg.get("hidden_size", 768), cfg.get("num_hidden_layers", 12)
    ffn, vocab = cfg.get("intermediate_size", 3072), cfg.get("vocab_size", 30522)
    pos, types = cfg.get("max_position_embeddings", 512), cfg.get("type_vocab_size", 2)
    groups = [
        ParamGroup("embeddings.word_embeddings.weight", (vocab, h)),
        ParamGroup("embeddings.position_embeddings.weight", (pos, h)),
        ParamGroup("embeddings.token_type_embeddings.weight", (types, h)),
    ]
    groups += norm("embeddings.LayerNorm", h)
    groups += linear("layer.attention.qkv", h, h, 3 * n_layer) + linear("layer.attention.output.dense", h, h, n_layer)
    groups += norm("layer.attention.output.LayerNorm", h, n_layer)
    groups += linear("layer.intermediate.dense", h, ffn, n_layer) + linear("layer.output.dense", ffn, h, n_layer)
    groups += norm("layer.output.LayerNorm", h, n_layer)
    if task in (Task.MASKED_LM, Task.CAUSAL_LM):
        groups = tied_head(groups, "embeddings.word_embeddings.weight")
        groups += linear("lm_head.transform.dense", h, h) + norm("lm_head.transform.LayerNorm", h)
        groups += [ParamGroup("lm_head.decoder.bias", (vocab,))]
    elif task == Task.SEQUENCE_CLASSIFICATION:
        if roberta:  # RobertaClassificationHead: dense + out_proj, no pooler
            groups += linear("classifier.dense", h, h) + linear("classifier.out_proj", h, num_labels)
        else:  # BertPooler + classifier
            groups += linear("pooler.dense", h, h) + linear("classifier", h, num_labels)
    else:
        groups += task_head(task, h, num_labels, seq_cls_bias=True)
    heads = cfg.get("num_attention_heads", 12)
    return Shape(
        Family.ENCODER_ONLY, n_layer, n_layer, 0, h, heads, heads, h // heads, ffn, vocab, pos, False, True, groups
    )


def bert(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    return _bert_like(cfg, task, num_labels, roberta=False)


def roberta(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    return _bert_like(cfg, task, num_labels, roberta=True)


def distilbert(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    h, n_layer = cfg.get("dim", 768), cfg.get("n_layers", 6)
    ffn, vocab, pos = cfg.get("hidden_dim", 3072), cfg.get("vocab_size", 30522), cfg.get("max_position_embeddings", 512)
    groups = [
        ParamGroup("embeddings.word_embeddings.weight", (vocab, h)),
        ParamGroup("embeddings.position_embeddings.weight", (pos, h)),
    ]
    groups += norm("embeddings.LayerNorm", h)
    groups += linear("layer.attention.qkvo", h, h, 4 * n_layer) + norm("layer.sa_layer_norm", h, n_layer)
    groups += linear("layer.ffn.lin1", h, ffn, n_layer) + linear("layer.ffn.lin2", ffn, h, n_layer)
    groups += norm("layer.output_layer_norm", h, n_layer)
    if task == Task.MASKED_LM:
        groups = tied_head(groups, "embeddings.word_embeddings.weight")
        groups += linear("vocab_transform", h, h) + norm("vocab_layer_norm", h)
        groups += [ParamGroup("vocab_projector.bias", (vocab,))]
    elif task == Task.SEQUENCE_CLASSIFICATION:
        groups += linear("pre_classifier", h, h) + linear("classifier", h, num_labels)
    else:
        groups += task_head(task, h, num_labels, seq_cls_bias=True)
    heads = cfg.get("n_heads", 12)
    return Shape(
        Family.ENCODER_ONLY, n_layer, n_layer, 0, h, heads, heads, h // heads, ffn, vocab, pos, False, True, groups
    )


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
        wi = linear(f"{prefix}.wi", d, ffn, n * (2 if gated else 1), bias=False)
        return wi + linear(f"{prefix}.wo", ffn, d, n, bias=False)

    def attn(prefix: str, n: int) -> list[ParamGroup]:
        return linear(f"{prefix}.qkv", d, inner, 3 * n, bias=False) + linear(f"{prefix}.o", inner, d, n, bias=False)

    groups = [ParamGroup("shared.weight", (vocab, d))]
    groups += attn("encoder.self", enc) + [ParamGroup("encoder.relative_attention_bias", (buckets, heads))]
    groups += norm("encoder.layer_norm", d, 2 * enc + 1, bias=False) + ff("encoder.ff", enc)
    groups += attn("decoder.self", dec) + [ParamGroup("decoder.relative_attention_bias", (buckets, heads))]
    groups += attn("decoder.cross", dec) + norm("decoder.layer_norm", d, 3 * dec + 1, bias=False)
    groups += ff("decoder.ff", dec)
    if task == Task.SEQ2SEQ_LM:
        if tied:
            groups = tied_head(groups, "shared.weight")
        else:
            groups += linear("lm_head", d, vocab, bias=False)
    elif task == Task.SEQUENCE_CLASSIFICATION:
        groups += linear("classification_head.dense", d, d) + linear("classification_head.out_proj", d, num_labels)
    elif task == Task.QUESTION_ANSWERING:
        groups += linear("qa_outputs", d, 2)
    return Shape(
        Family.ENCODER_DECODER,
        enc + dec,
        enc,
        dec,
        d,
        heads,
        heads,
        d_kv,
        ffn,
        vocab,
        cfg.get("n_positions"),
        gated,
        tied,
        groups,
    )


def opt(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    h, n_layer = cfg.get("hidden_size", 768), cfg.get("num_hidden_layers", 12)
    ffn, vocab = cfg.get("ffn_dim", 3072), cfg.get("vocab_size", 50272)
    pos, wep = cfg.get("max_position_embeddings", 2048), cfg.get("word_embed_proj_dim") or h
    bias = cfg.get("enable_bias", True)
    groups = [ParamGroup("embed_tokens.weight", (vocab, wep)), ParamGroup("embed_positions.weight", (pos + 2, h))]
    if wep != h:
        groups += linear("project_in", wep, h, bias=False) + linear("project_out", h, wep, bias=False)
    if cfg.get("do_layer_norm_before", True) and not cfg.get("_remove_final_layer_norm", False):
        groups += norm("final_layer_norm", h)
    groups += linear("layers.self_attn.qkvo", h, h, 4 * n_layer, bias=bias)
    groups += norm("layers.self_attn_layer_norm", h, n_layer)
    groups += linear("layers.fc1", h, ffn, n_layer, bias=bias) + linear("layers.fc2", ffn, h, n_layer, bias=bias)
    groups += norm("layers.final_layer_norm", h, n_layer)
    if task == Task.CAUSAL_LM:
        groups = tied_head(groups, "embed_tokens.weight")
    groups += task_head(task, wep, num_labels, seq_cls_bias=False)
    heads = cfg.get("num_attention_heads", 12)
    return Shape(
        Family.DECODER_ONLY, n_layer, 0, n_layer, h, heads, heads, h // heads, ffn, vocab, pos, False, True, groups
    )


#: model_type → builder. Anything else falls back to transformers on the meta device.
BUILDERS: dict[str, Callable[[dict, TaskName, int], Shape]] = {
    "gpt2": gpt2,
    "bert": bert,
    "roberta": roberta,
    "distilbert": distilbert,
    "t5": t5,
    "opt": opt,
    "llama": llama,
    "mistral": llama,
    "qwen2": qwen2,
    "mixtral": mixtral,
    "qwen2_moe": qwen2_moe,
    "qwen3": qwen3,
    "qwen3_moe": qwen3_moe,
    "gemma": gemma,
    "gemma2": gemma2,
    "gemma3_text": gemma3_text,
    "phi3": phi3,
}

#: Task heads of its family a closed-form type has no transformers class for (transformers 5.24's Auto mappings:
#: no ``GemmaForQuestionAnswering``, ``Gemma2…``, ``Gemma3…``, ``Phi3ForQuestionAnswering``), so no plan for them.
MISSING_TASKS: dict[str, frozenset[str]] = {
    t: frozenset({Task.QUESTION_ANSWERING.value}) for t in ("gemma", "gemma2", "gemma3_text", "phi3")
}

#: model_type → family, for the closed-form builders.
FAMILIES: dict[str, FamilyName] = {
    "gpt2": Family.DECODER_ONLY,
    "opt": Family.DECODER_ONLY,
    "llama": Family.DECODER_ONLY,
    "mistral": Family.DECODER_ONLY,
    "qwen2": Family.DECODER_ONLY,
    "mixtral": Family.DECODER_ONLY,
    "qwen2_moe": Family.DECODER_ONLY,
    "qwen3": Family.DECODER_ONLY,
    "qwen3_moe": Family.DECODER_ONLY,
    "gemma": Family.DECODER_ONLY,
    "gemma2": Family.DECODER_ONLY,
    "gemma3_text": Family.DECODER_ONLY,
    "phi3": Family.DECODER_ONLY,
    "bert": Family.ENCODER_ONLY,
    "roberta": Family.ENCODER_ONLY,
    "distilbert": Family.ENCODER_ONLY,
    "t5": Family.ENCODER_DECODER,
}
