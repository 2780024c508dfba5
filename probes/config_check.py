"""The checks a config.json passes before advisor counts anything from it: types, ranges and divisibility.

Every size the model profile reads (:mod:`probes.architectures`, :mod:`probes.decoders`, and the common names
transformers' configuration classes use, which :mod:`probes.meta_count` hands to transformers) must be a whole
number (not a bool, null, float, NaN or Infinity) within the documented limits of :mod:`advisor.core.limits`; the
widths must split into the heads as transformers requires (BertSelfAttention: "The hidden size is not a
multiple of the number of attention heads"; GPT2Attention and OPTAttention: "embed_dim must be divisible by
num_heads"; grouped-query attention repeats each key/value head num_attention_heads / num_key_value_heads
times, ``repeat_kv`` in ``modeling_llama.py``), transformers 5.23,
https://github.com/huggingface/transformers/tree/main/src/transformers/models. A config that fails is one
:class:`~advisor.core.errors.BadConfigError` line naming the field and the file (exit 4), before any work.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from advisor.core.errors import BadConfigError
from advisor.core.text import shown
from advisor.core.limits import (
    MAX_EXPERTS,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_LAYERS,
    MAX_VOCAB,
    MAX_WIDTH,
)

#: config key → (least, most) for the counts the profile reads.
_COUNTS: dict[str, tuple[int, int]] = {
    **{k: (1, MAX_LAYERS) for k in ("n_layer", "num_hidden_layers", "n_layers", "num_layers")},
    # a composite model may leave one stack empty
    **{k: (0, MAX_LAYERS) for k in ("num_decoder_layers", "encoder_layers", "decoder_layers")},
    **{
        k: (1, MAX_WIDTH)
        for k in (
            "n_embd",
            "hidden_size",
            "dim",
            "d_model",
            "n_inner",
            "intermediate_size",
            "hidden_dim",
            "d_ff",
            "ffn_dim",
            "word_embed_proj_dim",
            "head_dim",
            "d_kv",
            "moe_intermediate_size",
            "n_head",
            "num_attention_heads",
            "n_heads",
            "num_heads",
            "num_key_value_heads",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
        )
    },
    **{
        k: (1, MAX_VOCAB)
        for k in ("vocab_size", "n_positions", "max_position_embeddings", "relative_attention_num_buckets")
    },
    **{k: (0, MAX_VOCAB) for k in ("type_vocab_size",)},
    **{k: (0, MAX_WIDTH) for k in ("shared_expert_intermediate_size",)},
    **{k: (0, MAX_EXPERTS) for k in ("num_local_experts", "num_experts", "num_experts_per_tok")},
    **{k: (1, MAX_LAYERS) for k in ("decoder_sparse_step",)},
}
#: Keys transformers lets be null (the configuration class then derives them: n_inner = 4·n_embd, head_dim =
#: hidden / heads, num_key_value_heads = heads, num_decoder_layers = num_layers, no position table, ...).
_NULLABLE = {
    "n_inner",
    "num_key_value_heads",
    "head_dim",
    "num_decoder_layers",
    "word_embed_proj_dim",
    "max_position_embeddings",
    "n_positions",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
}
#: Flags the profile reads (a string "yes" is not a flag; null reads as false, as transformers tests them:
#: ``if config.tie_word_embeddings``).
_FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "qkv_bias", "enable_bias", "do_layer_norm_before")
#: (width, heads) pairs whose width must split into whole heads when the config gives no head_dim.
_SPLITS = (
    ("n_embd", "n_head"),
    ("hidden_size", "num_attention_heads"),
    ("dim", "n_heads"),
    ("d_model", "encoder_attention_heads"),
    ("d_model", "decoder_attention_heads"),
)
#: Nested configurations of multimodal and composite models that hold a language model's sizes.
_SUB_CONFIGS = ("text_config", "language_config", "llm_config", "encoder", "decoder")


def read_bounded(file: Path | str, limit: int = MAX_JSON_BYTES) -> str:
    """The UTF-8 text of the regular file ``file``, read to at most ``limit`` bytes: the one reader of every file
    advisor reads (config.json, adapter_config.json, a ``--plan`` file). A FIFO, a device (``/dev/zero``) or a socket
    is refused without waiting for a writer or reading without end: the file is opened without blocking and its
    type checked on the open descriptor.

    Raises:
        OSError: the file cannot be opened or read (a directory: EISDIR). ValueError: not a regular file, larger
            than ``limit``, over :data:`~advisor.core.limits.MAX_JSON_VALUES` values, or not UTF-8 (UnicodeDecodeError's
            position in the message).
    """
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO would wait for a writer
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(file))
        if not stat.S_ISREG(mode):
            raise ValueError("it is not a regular file (a FIFO, a device or a socket)")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 2**20} MiB")
    values = data.count(b"{") + data.count(b"[") + data.count(b",")  # an upper bound on its JSON values, counted in C
    if values > MAX_JSON_VALUES:
        raise ValueError(f"it holds over {MAX_JSON_VALUES:,} JSON values ({values:,} objects, lists and commas)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None


def read_json(file: Path | str, label: str) -> Any:
    """The JSON value of a file the user named (a plan file: ``label`` is how the error names it, ``--plan PATH`` or
    ``the plan PATH``), read by :func:`read_bounded`.

    Raises:
        UsageError: one line naming ``label``: unreadable (a FIFO, a device, a directory), larger than a plan, not
            UTF-8, not JSON (the parser's message and line), or nested too deeply to parse.
    """
    from advisor.core.errors import UsageError

    try:
        return json.loads(read_bounded(file))
    except OSError as err:
        raise UsageError(f"cannot read {label}: {err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{label} is not JSON: {err.msg} at line {err.lineno}") from None
    except ValueError as err:  # not a regular file, larger than a plan, not UTF-8
        raise UsageError(f"cannot read {label}: {err}") from None
    except RecursionError:
        raise UsageError(f"{label} nests too deeply to be an advisor JSON") from None


def depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def check_config(config: dict, where: str) -> None:
    """Refuse a config whose fields the profile cannot use (see the module docstring).

    Raises:
        BadConfigError: one line, ``'<where>': <field> must be ..., got ...``.
    """
    if depth(config) > MAX_JSON_DEPTH:
        raise BadConfigError(f"'{where}' nests deeper than {MAX_JSON_DEPTH} levels: not a transformers config")
    _check(config, where, "")
    for key in _SUB_CONFIGS:
        if isinstance(config.get(key), dict):
            _check(config[key], where, f"{key}.")


def _check(config: dict, where: str, prefix: str) -> None:
    def bad(key: str, what: str) -> BadConfigError:
        return BadConfigError(f"'{where}': {prefix}{key} {what}, got {json.dumps(config[key])[:60]}")

    dunder = next((key for key in config if key.startswith("__")), None)
    if dunder is not None:  # transformers sets every key as an attribute: __class__ or __dict__ breaks the object
        raise BadConfigError(f"'{where}': {prefix}{shown(dunder)} is not a config field (a name that starts with __)")

    architectures = config.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)
    ):
        raise bad("architectures", "must be a list of class names")
    for key, (least, most) in _COUNTS.items():
        if key not in config or (config[key] is None and key in _NULLABLE):
            continue
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int):
            kind = "not a number" if isinstance(value, float) and not math.isfinite(value) else "a whole number"
            raise bad(key, f"must be a whole number{'' if kind == 'a whole number' else ' (' + kind + ')'}")
        if not least <= value <= most:
            raise bad(key, f"must be from {least} to {most}")
    for key in _FLAGS:
        if key in config and config[key] is not None and not isinstance(config[key], bool):
            raise bad(key, "must be true or false")
    for width, heads in _SPLITS:
        h, n = config.get(width), config.get(heads)
        if isinstance(h, int) and isinstance(n, int) and n and not config.get("head_dim") and h % n:
            raise BadConfigError(
                f"'{where}': {prefix}{width} {h} is not a multiple of {prefix}{heads} {n} (transformers refuses it)"
            )
    heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv, int) and kv and heads % kv:
        raise BadConfigError(
            f"'{where}': {prefix}num_attention_heads {heads} is not a multiple of "
            f"{prefix}num_key_value_heads {kv} (grouped-query attention repeats each key/value head)"
        )
    for experts_key in ("num_local_experts", "num_experts"):
        experts, k = config.get(experts_key), config.get("num_experts_per_tok")
        if isinstance(experts, int) and isinstance(k, int) and experts and k > experts:
            raise BadConfigError(
                f"'{where}': {prefix}num_experts_per_tok {k} is more than {prefix}{experts_key} {experts}"
            )
