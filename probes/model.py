"""Model facts from a config.json: family, exact parameter count, shapes, checkpoint dtype.

Resolution order for ``--model ID_OR_PATH`` (weights are never downloaded):

1. a local folder holding ``config.json``, or a path to a config file;
2. the Hugging Face cache (``huggingface_hub.try_to_load_from_cache``);
3. the Hub (``huggingface_hub.hf_hub_download`` of config.json alone), only when not offline
   (``HF_HUB_OFFLINE``) and the Hub answers a 2-second connection check, the whole look-up held to one
   deadline (:data:`probes.hub.HUB_TIMEOUT_S`, ``--hub-timeout``) with the library's retry warnings silenced, so an
   offline machine or a Hub that never answers costs seconds, not the client's minutes of retries;
4. the shipped catalog (``probes/configs``).

Parameter counts for the catalog families are closed-form (:mod:`probes.architectures`); other
architectures are instantiated by transformers on ``torch.device("meta")`` (:mod:`probes.meta_count`).
"""

from __future__ import annotations

import json
import math
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from probes.architectures import BUILDERS, FAMILIES, MISSING_TASKS
from probes.checkpoint import QuantizedCheckpoint, adapter_hint, checkpoint_dtype, checkpoint_quantization
from probes.config_check import check_config, read_bounded
from probes.shapes import FamilyName, ParamGroup, TaskName
from advisor.core.errors import BadConfigError, ModelNotFoundError, UsageError
from probes.model_ids import RENAMED_IDS, _catalog_dir, catalog_ids, near_matches
from probes.hub import download_config, hub_constants, hub_offline, hub_reachable, hub_timeout_s
from advisor.core.kernels import Attention, closed_form_attention
from advisor.core.limits import MAX_MODEL_ID
from advisor.core.text import shown
from advisor.core.vocabulary import Family, Task, values

TASKS: tuple[str, ...] = values(Task)  #: every task head, in the CLI's order

#: Architecture-name suffix → task head (transformers' naming convention for model classes).
_ARCH_SUFFIX_TASK: list[tuple[str, TaskName]] = [
    ("ForCausalLM", Task.CAUSAL_LM), ("LMHeadModel", Task.CAUSAL_LM), ("ForMaskedLM", Task.MASKED_LM),
    ("ForConditionalGeneration", Task.SEQ2SEQ_LM), ("ForSeq2SeqLM", Task.SEQ2SEQ_LM),
    ("ForSequenceClassification", Task.SEQUENCE_CLASSIFICATION), ("ForQuestionAnswering", Task.QUESTION_ANSWERING),
]

#: Families pretrained in bf16 whose configs do not say so. T5 was pretrained on TPUs in bf16;
#: the HF performance guide ("bf16") warns such models overflow when fine-tuned in fp16:
#: https://huggingface.co/docs/transformers/v4.18.0/en/performance#bf16
_BF16_PRETRAINED_TYPES = {"t5", "mt5", "umt5", "switch_transformers", "byt5"}
#: Families whose fp16 fine-tuning is documented to overflow (inf / NaN losses): T5's feed-forward outputs pass
#: 65504 (https://github.com/huggingface/transformers/issues/5651, /14189; the T5 authors: "all of our experiments
#: use bfloat16 activations", https://github.com/google-research/text-to-text-transfer-transformer/issues/539).
FP16_OVERFLOW_TYPES = frozenset(_BF16_PRETRAINED_TYPES)

class ModelProfile(BaseModel):
    """What advisor knows about one model with one task head."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: str = Field(description="the id or path the user gave")
    source: Literal["local", "cache", "hub", "catalog"] = Field(description="where config.json came from")
    config_path: str | None = Field(None, description="the config.json read (None for the packaged catalog)")
    model_type: str
    """the config's model_type, e.g. 'gpt2'"""
    architectures: list[str] = Field(default_factory=list)
    """the config's architectures, e.g. ['GPT2LMHeadModel']"""
    family: FamilyName
    """decoder, encoder or encoder-decoder"""
    task: TaskName = Field(description="the task head the counts are for")
    supported_tasks: list[TaskName]
    """the task heads advisor can count for this model type"""
    num_parameters: int = Field(description="exact parameter count with the task head, tied embeddings once; "
                                            "a mixture of experts: every expert (what memory holds)")
    matmul_parameters: int = Field(description="parameters used in a matmul (N of 6·N·T FLOPs for a dense model); "
                                               "a mixture of experts: every expert")
    active_parameters: int = Field(
        description="parameters one token uses: all but the routed experts it is not sent to (Mixtral 8x7B: "
                    "12.9B of 46.7B, https://mistral.ai/news/mixtral-of-experts); = num_parameters for a dense model")
    active_matmul_parameters: int = Field(
        description="matmul parameters one token uses, routers included: the N of 6·N·T FLOPs for a mixture of "
                    "experts (Fedus et al. 2021, https://arxiv.org/abs/2101.03961 sec. 2); = matmul_parameters "
                    "for a dense model")
    num_experts: int = Field(0, description="routed experts per mixture-of-experts block; 0 for a dense model")
    experts_per_token: int = Field(0, description="routed experts each token is sent to (top-k); 0 for a dense model")
    shared_experts: int = Field(0, description="always-active (shared) experts per mixture-of-experts block "
                                               "(Qwen-MoE 1, DeepSeek-V2-Lite 2); 0 if none")
    moe_layers: int = Field(0, description="transformer blocks whose MLP is a mixture of experts; 0 for a dense model")
    capacity_factor: float | None = Field(
        None, description="expert capacity factor C of the config (each expert takes at most C·tokens·k/experts "
                          "tokens, padded to that size; Fedus et al. 2021 sec. 2.2); None: dropless or dense")
    parameter_count_method: Literal["closed-form", "meta-device"]
    """closed-form (per-family formula) or meta-device (transformers on torch.device('meta'))"""
    num_layers: int = Field(description="transformer blocks in all stacks")
    encoder_layers: int
    """transformer blocks in the encoder stack (0 for a decoder)"""
    decoder_layers: int
    """transformer blocks in the decoder stack (0 for an encoder)"""
    hidden_size: int
    """model width h, elements"""
    num_attention_heads: int
    """attention heads per block"""
    num_key_value_heads: int
    """key/value heads per block (fewer than the heads under grouped-query attention)"""
    head_dim: int
    """elements per attention head"""
    ffn_size: int
    """MLP inner width, elements; a mixture of experts: the width one token passes through in a MoE block
    (experts_per_token routed experts' width + the shared experts')"""
    vocab_size: int
    """tokens in the vocabulary (embedding rows)"""
    max_position_embeddings: int | None = Field(None, description="longest sequence the model takes; None if unbounded")
    gated_mlp: bool = Field(description="SwiGLU/GeGLU MLP (three FFN matrices)")
    tied_embeddings: bool
    """the output head shares the input embedding's weights"""
    checkpoint_dtype: Literal["float32", "float16", "bfloat16"] = Field(
        description="dtype the config declares (torch_dtype); float32 when absent")
    quantization: QuantizedCheckpoint | None = Field(None, description="how a pre-quantized checkpoint stores its "
                                                     "weights (config.json's quantization_config); None: plain weights")
    pretrained_in_bf16: bool = Field(description="pretrained in bf16: fine-tuning in fp16 risks overflow")
    supports_gradient_checkpointing: bool
    """transformers implements activation checkpointing for this model type"""
    attention_kernels: list[str] = Field(
        default_factory=lambda: values(Attention),
        description="attention implementations transformers' code for this model type runs (eager always; sdpa, "
                    "flash-attention-2 / -3 where its class declares them), best first")
    dropout: bool = Field(description="the config trains with dropout (masks are kept for backward)")
    notes: list[str] = Field(default_factory=list, description="how the config was found, when it matters")
    parameter_shapes: list[tuple[tuple[int, ...], int]] = Field(
        default_factory=list, exclude=True,
        description="(shape, how many) of every parameter tensor; for factored optimizer states")

    @property
    def largest_parameter_elements(self) -> int:
        """Elements of the largest parameter tensor (the embedding, in most language models)."""
        return _largest_elements(tuple(self.parameter_shapes))

    @property
    def factored_statistics_elements(self) -> int:
        """Elements of Adafactor's factored second moments: a row and a column statistic per matrix (rows =
        the product of the leading dimensions), the full tensor for vectors (Shazeer & Stern 2018,
        https://arxiv.org/abs/1804.04235 sec. 3)."""
        return _factored_elements(tuple(self.parameter_shapes))

    @property
    def routed_active_matmul_parameters(self) -> int:
        """Matmul parameters of the routed experts one token runs through (0 for a dense model): the part of
        :attr:`active_matmul_parameters` an expert capacity factor pads. The routed experts hold
        (matmul − active_matmul)·E/(E − k) parameters, of which a token uses k/E."""
        k, experts = self.experts_per_token, self.num_experts
        if not experts or k >= experts:
            return 0
        return (self.matmul_parameters - self.active_matmul_parameters) * k // (experts - k)

    def untied(self) -> "ModelProfile":
        """This model with its output head a matrix of its own rather than the input embedding's: a second
        vocabulary × hidden matrix (every parameter count grows by it; the matmuls are the same). What LitGPT builds:
        its GPT has ``lm_head`` and ``wte`` apart, both loaded from the checkpoint, unless told
        ``tie_embeddings`` (https://github.com/Lightning-AI/litgpt, ``litgpt/model.py``). Itself when untied already
        or without a vocabulary head."""
        if not self.tied_embeddings or not Task.of(self.task).language_modeling:
            return self
        head = self.vocab_size * self.hidden_size
        return self.model_copy(update={"tied_embeddings": False, "num_parameters": self.num_parameters + head,
                                       "active_parameters": self.active_parameters + head,
                                       "parameter_shapes": [*self.parameter_shapes,
                                                            ((self.vocab_size, self.hidden_size), 1)]})

    @property
    def routed_parameters(self) -> int:
        """Parameters of every routed expert of every MoE block (0 for a dense model): what expert parallelism
        splits over its ranks; the attention, the shared experts, the routers and the embeddings stay whole."""
        k, experts = self.experts_per_token, self.num_experts
        if not experts or k >= experts:
            return 0
        return (self.matmul_parameters - self.active_matmul_parameters) * experts // (experts - k)


# Cached by the shapes themselves (not on the instance: model_copy would carry a stale value along).
@lru_cache(maxsize=64)
def _largest_elements(shapes: tuple[tuple[tuple[int, ...], int], ...]) -> int:
    return max((math.prod(shape) for shape, _count in shapes), default=0)


@lru_cache(maxsize=64)
def _factored_elements(shapes: tuple[tuple[tuple[int, ...], int], ...]) -> int:
    # transformers' Adafactor: row statistic grad.shape[:-1], column statistic grad.shape[:-2] + shape[-1:],
    # so a fused (experts, rows, columns) tensor has a row and a column statistic per expert
    return sum(((math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]) if len(shape) >= 2 else shape[0]) * count
               for shape, count in shapes)


def load_config(model: str) -> tuple[dict, str, str | None, list[str]]:
    """Find and read config.json for an id or path.

    Returns:
        (config dict, source, path or None, notes about the resolution).
    Raises:
        ModelNotFoundError: nothing found (the message names the id and how to pass a path).
        BadConfigError: the file is not valid JSON or not a JSON object.
    """
    notes: list[str] = []
    if not isinstance(model, str) or not model.strip():
        raise UsageError(f"--model must be a Hub id or a path, got {model!r}")
    if len(model) > MAX_MODEL_ID or "\0" in model:
        raise UsageError(f"--model '{shown(model, 40)}' ({len(model)} characters) is not a Hub id or a path: at most "
                         f"{MAX_MODEL_ID} characters, no NUL")
    try:
        return _load_config(model, notes)
    except (OSError, RuntimeError) as exc:  # a name too long for the file system, '~nosuchuser', an unreadable folder
        raise ModelNotFoundError(f"model '{shown(model, 80)}' cannot be looked up here: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None


def _load_config(model: str, notes: list[str]) -> tuple[dict, str, str | None, list[str]]:
    """:func:`load_config` of a checked id (OSError and RuntimeError from the file system pass through)."""
    path = Path(model).expanduser()
    if path.exists():
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ModelNotFoundError(f"no config.json in '{shown(model)}'" + (adapter_hint(path) if path.is_dir() else ""))
        return _read_json(file), "local", str(file), notes
    looks_like_path = model.startswith((".", "/", "~")) or model.endswith(".json") or model.count("/") > 1
    if looks_like_path:
        raise ModelNotFoundError(f"'{shown(model)}' does not exist")
    cached = _from_hf_cache(model)
    if isinstance(cached, str) and os.path.isfile(cached):
        return _read_json(Path(cached)), "cache", cached, notes

    shipped_id = RENAMED_IDS.get(model.lower(), model)
    shipped = _catalog_dir().joinpath(shipped_id.replace("/", "--") + ".json")
    if hub_offline():
        hub = "skipped (offline: HF_HUB_OFFLINE=1)"
    else:
        deadline = time.monotonic() + hub_timeout_s()
        if hub_reachable(min(2.0, hub_timeout_s())):
            downloaded = download_config(model, deadline, notes)
            if downloaded is not None:
                return _read_json(Path(downloaded)), "hub", downloaded, notes
            hub = "asked, no config.json"
        else:
            notes.append("the Hugging Face Hub is unreachable; using local sources only")
            hub = f"skipped (unreachable within {min(2.0, hub_timeout_s()):g} s)"
    if shipped.is_file():
        if shipped_id != model:
            notes.append(f"'{shown(model)}' is the Hub's id of the shipped '{shipped_id}'")
        return json.loads(shipped.read_text(encoding="utf-8")), "catalog", None, notes
    near = near_matches(model)
    raise ModelNotFoundError(
        f"model '{shown(model)}' not found: no such folder or file; the Hugging Face cache: not there; the Hub: {hub}; "
        "the shipped catalog: not there" + (f"; near matches: {', '.join(near)}" if near else "")
        + "; give a local folder with a config.json, or a config.json path, e.g. ./my-model/config.json")


def _from_hf_cache(model: str) -> str | None:
    """The cached config.json of ``model`` (``huggingface_hub.try_to_load_from_cache``), or None.

    The library's lookup imports its whole download stack (~0.15 s, more than the rest of ``recommend``);
    a model the cache has no folder for is answered without it. The folder name follows the library's
    own constants (``models--{org}--{name}``: huggingface_hub "Manage the cache", cache structure)."""
    constants = hub_constants()

    folder = Path(constants.HF_HUB_CACHE) / constants.REPO_ID_SEPARATOR.join(["models", *model.split("/")])
    if not folder.is_dir():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # invalid repo id, unreadable cache: not in the cache
        return None
    return cached if isinstance(cached, str) else None


def _read_json(file: Path) -> dict:
    try:
        data = json.loads(read_bounded(file))
    except json.JSONDecodeError as exc:
        raise BadConfigError(f"'{file}' is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, larger than a config
        raise BadConfigError(f"cannot read '{file}': {getattr(exc, 'strerror', None) or exc}") from None
    except RecursionError:
        raise BadConfigError(f"'{file}' nests too deeply to be a transformers config") from None
    if not isinstance(data, dict):
        raise BadConfigError(f"'{file}' is not a JSON object")
    return data


def default_task(config: dict, family: FamilyName) -> TaskName:
    """The task head named by the config's ``architectures``, else the family's pretraining head."""
    for arch in config.get("architectures") or []:
        for suffix, task in _ARCH_SUFFIX_TASK:
            if str(arch).endswith(suffix):
                return task
    return Family(family).default_task.value


def profile_model(model: str, task: TaskName | None = None, num_labels: int = 2) -> ModelProfile:
    """Resolve a model and profile it for a task head.

    Args:
        model: a Hub id (``gpt2``), a folder with config.json, or a config.json path.
        task: the task head; default from the config's ``architectures``.
        num_labels: classes of a sequence-classification head.
    Raises:
        ModelNotFoundError, BadConfigError, UsageError (a task the family does not support).
    """
    config, source, path, notes = load_config(model)
    profile = profile_from_config(config, model, source, path, task, num_labels)
    if source == "catalog":
        notes.append(f"config.json of '{shown(model)}' from advisor's shipped catalog")
    return profile.model_copy(update={"notes": notes}) if notes else profile


def profile_from_config(config: dict, model_id: str, source: str = "local", path: str | None = None,
                        task: TaskName | None = None, num_labels: int = 2) -> ModelProfile:
    """Profile an already-loaded config dict (see :func:`profile_model`)."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise BadConfigError(f"'{shown(path or model_id)}' is not a transformers config: it has no 'model_type'")
    check_config(config, path or model_id)
    builder = BUILDERS.get(model_type)
    if builder is not None:
        family = FAMILIES[model_type]
        chosen = task or default_task(config, family)
        _check_task(model_id, family, chosen, MISSING_TASKS.get(model_type, frozenset()))
        try:
            shape = builder(config, chosen, num_labels)
            unsized = next((g for g in shape.groups if not all(isinstance(d, int) for d in (*g.shape, g.count))), None)
            if unsized is not None:  # a null size the builder needs (n_positions: null for GPT-2's position table)
                nulls = ", ".join(f"{shown(k)}: null" for k, v in config.items() if v is None)
                raise BadConfigError(f"config of '{shown(model_id)}' leaves a size of {unsized.name} null or not a "
                                     f"whole number: {unsized.shape}" + (f" ({nulls})" if nulls else ""))
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise BadConfigError(f"config of '{model_id}' has invalid sizes: {exc}") from None
        method = "closed-form"
        supports_ckpt = True
        kernels = closed_form_attention(model_type)
    else:
        from probes.meta_count import shape_on_meta_device

        shape, family, supports_ckpt, kernels = shape_on_meta_device(config, task, num_labels, default_task)
        chosen = task or default_task(config, family)
        _check_task(model_id, family, chosen)
        method = "meta-device"
    dtype = checkpoint_dtype(config)
    return ModelProfile(
        id=model_id, source=source, config_path=path, model_type=model_type, num_parameters=shape.num_parameters,
        architectures=list(config.get("architectures") or []), family=shape.family, task=chosen,
        supported_tasks=[t.value for t in Family(shape.family).tasks if t not in MISSING_TASKS.get(model_type, ())],
        matmul_parameters=shape.matmul_parameters, active_parameters=shape.active_parameters,
        active_matmul_parameters=shape.active_matmul_parameters, num_experts=shape.num_experts,
        experts_per_token=shape.experts_per_token, shared_experts=shape.shared_experts, moe_layers=shape.moe_layers,
        capacity_factor=shape.capacity_factor, parameter_count_method=method,
        num_layers=shape.layers, encoder_layers=shape.encoder_layers, decoder_layers=shape.decoder_layers,
        hidden_size=shape.hidden, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim, ffn_size=shape.ffn, vocab_size=shape.vocab,
        max_position_embeddings=shape.max_positions, gated_mlp=shape.gated_mlp,
        tied_embeddings=bool(shape.tied_embeddings), checkpoint_dtype=dtype,
        quantization=checkpoint_quantization(config),
        pretrained_in_bf16=dtype == "bfloat16" or model_type in _BF16_PRETRAINED_TYPES,
        supports_gradient_checkpointing=supports_ckpt, attention_kernels=kernels,
        dropout=_has_dropout(config),
        parameter_shapes=[(g.shape, g.count) for g in shape.groups],
    )


#: Config keys of dropout probabilities across the transformers families.
_DROPOUT_KEYS = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout_prob", "attention_probs_dropout_prob",
                 "dropout", "dropout_rate", "attention_dropout", "hidden_dropout", "activation_dropout")


def _has_dropout(config: dict) -> bool:
    return any(isinstance(config.get(k), (int, float)) and config[k] > 0 for k in _DROPOUT_KEYS)


def _check_task(model_id: str, family: FamilyName, task: TaskName, missing: frozenset[str] = frozenset()) -> None:
    tasks = [t for t in Family(family).tasks if t not in missing]  # missing: MISSING_TASKS of a closed-form type
    if task not in tasks:
        raise UsageError(f"task '{task}' does not fit '{model_id}' ({family}); choose one of: {', '.join(tasks)}")


__all__ = ["ModelProfile", "ParamGroup", "TASKS", "catalog_ids", "load_config", "profile_model",
           "profile_from_config", "default_task"]
