"""How a checkpoint stores its weights: the dtype its config.json declares and, for a pre-quantized checkpoint, the
quantization its ``quantization_config`` names.

transformers writes ``quantization_config`` into the config.json of a model saved quantized, with the
``quant_method`` that loads it back (transformers "Quantization" overview,
https://huggingface.co/docs/transformers/main/en/quantization/overview; the keys of each method's config class,
``transformers.utils.quantization_config``). A checkpoint saved by bitsandbytes in 4 bits
(``load_in_4bit``, ``bnb_4bit_quant_type`` nf4 or fp4, ``bnb_4bit_use_double_quant``: unsloth's ``*-bnb-4bit``
repositories, a QLoRA base saved after quantizing) holds only the 4-bit weights: what QLoRA trains adapters over
(Dettmers et al. 2023, https://arxiv.org/abs/2305.14314 sec. 3), never the 16-bit weights full fine-tuning or LoRA
start from. Other methods (GPTQ, AWQ, bitsandbytes 8-bit, fp8, compressed-tensors, ...) store weights advisor does
not price. A folder PEFT saved holds an adapter and its ``adapter_config.json``, not a model: :func:`adapter_hint`
names the base model to pass instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from advisor.core.errors import BadConfigError
from advisor.core.text import shown

_DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


def checkpoint_dtype(config: dict) -> str:
    """The dtype the config declares (``torch_dtype``, transformers 4.56+: ``dtype``): float32, float16 or bfloat16;
    float32 when absent (transformers' default).

    Raises:
        BadConfigError: another dtype.
    """
    raw = config.get("torch_dtype") or config.get("dtype") or "float32"
    name = _DTYPE_NAMES.get(str(raw).replace("torch.", "").lower())
    if name is None:
        raise BadConfigError(f"config.json declares an unknown dtype '{raw}'")
    return name


class QuantizedCheckpoint(BaseModel):
    """A checkpoint stored quantized, as its config.json's ``quantization_config`` says."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    method: str = Field(
        description="the config's quant_method (bitsandbytes, gptq, awq, fp8, compressed-tensors, ...), lower case"
    )
    bits: int | None = Field(
        None,
        description="bits a weight: 4 or 8 for bitsandbytes (load_in_4bit / load_in_8bit), "
        "the config's 'bits' for others; None when it does not say",
    )
    double_quant: bool = Field(
        False, description="bitsandbytes 4-bit: the absmax constants quantized again (bnb_4bit_use_double_quant)"
    )

    @property
    def bitsandbytes_4bit(self) -> bool:
        """Weights in bitsandbytes' 4-bit blocks (NF4 or FP4, the same bytes): the base QLoRA trains over."""
        return self.method == "bitsandbytes" and self.bits == 4

    @property
    def label(self) -> str:
        """The quantization in a few words, e.g. 'bitsandbytes 4-bit', 'gptq 4-bit', 'fp8'."""
        return f"{self.method} {self.bits}-bit" if self.bits else self.method


def checkpoint_quantization(config: dict) -> QuantizedCheckpoint | None:
    """The quantization a config.json's ``quantization_config`` declares, or None for a checkpoint of plain weights.

    Raises:
        BadConfigError: a ``quantization_config`` that is not an object or names no ``quant_method``.
    """
    raw = config.get("quantization_config")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("quant_method"), str) or not raw["quant_method"]:
        raise BadConfigError("config.json's quantization_config is not an object with a quant_method")
    method = shown(raw["quant_method"].strip().lower(), 40)  # shown in messages and the profile: a file's string
    if method == "bitsandbytes":
        bits = 4 if raw.get("load_in_4bit") is True else 8 if raw.get("load_in_8bit") is True else None
    else:
        bits = raw.get("bits") if isinstance(raw.get("bits"), int) and not isinstance(raw.get("bits"), bool) else None
    return QuantizedCheckpoint(
        method=method, bits=bits, double_quant=bits == 4 and raw.get("bnb_4bit_use_double_quant") is True
    )


def planned_double_quant(quantization: QuantizedCheckpoint | None) -> bool:
    """QLoRA's double quantization as advisor plans it: on (rule ``method.double-quantization``), unless a
    pre-quantized bitsandbytes 4-bit checkpoint stores its constants without it (those are the bytes it loads)."""
    return quantization.double_quant if quantization is not None and quantization.bitsandbytes_4bit else True


def adapter_hint(folder) -> str:
    """For a folder without config.json that holds a PEFT adapter (``adapter_config.json``, PEFT's
    ``PeftConfig.save_pretrained``: ``peft_type``, ``base_model_name_or_path``, ``r``), what to pass instead, as the
    end of the not-found message (": it is a LoRA adapter over 'base': pass --model base --method lora --lora-rank
    16"); "" for any other folder, or an adapter config that cannot be read."""
    from probes.config_check import read_bounded

    try:
        raw = json.loads(read_bounded(Path(folder) / "adapter_config.json"))
    except (OSError, ValueError, RecursionError):
        return ""
    base = raw.get("base_model_name_or_path") if isinstance(raw, dict) else None
    if not isinstance(base, str) or not base:
        return ""
    base = shown(base)  # a file's string, shown on the terminal
    kind = shown(raw.get("peft_type") or "PEFT", 40).upper()
    if kind != "LORA":
        return f": it is a {kind} adapter over '{base}', which advisor does not plan: pass --model {base}"
    rank = raw.get("r")
    shape = f" --lora-rank {rank}" if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0 else ""
    return f": it is a LoRA adapter over '{base}': pass --model {base} --method lora{shape} (or qlora)"
