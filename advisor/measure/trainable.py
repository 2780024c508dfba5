"""Build what a training step of a plan needs: the transformers model from its config in the plan's
weights dtype, LoRA adapters over it (PEFT), the optimizer, activation checkpointing and a synthetic
batch. Shared by the simulator (fake tensors) and the validator (real trial steps), so both run the
same model the same way; the adapters are the ones ``--emit`` writes (:mod:`probes.lora_config`).

Imports torch, transformers and peft when called (off the fast path).
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

from advisor.core.errors import UsageError
from probes.lora_config import WEIGHT_DTYPES, bnb_config_kwargs, lora_config_kwargs
from probes.model import ModelProfile, load_config
from advisor.core.kernels import Attention
from advisor.core.vocabulary import Device, Method, Optimizer, Precision, Task, WeightsDtype
from rules import Plan

#: Config keys of attention-probability dropout.
ATTENTION_DROPOUT_KEYS = ("attn_pdrop", "attention_probs_dropout_prob", "attention_dropout")
#: Weight files ``from_pretrained`` reads from a local folder.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
#: How a missing-package error names an optimizer (default: its spec's summary).
_MISSING_PACKAGE_NAMES = {Optimizer.ADAMW_8BIT: "8-bit Adam"}


def hf_config(
    model: ModelProfile,
    plan: Plan,
    raw: dict | None = None,
    *,
    zero_attention_dropout: bool = False,
    simulated: bool = False,
):
    """The ``transformers`` config of ``model`` for ``plan``'s device.

    Attention: the plan's kernel (``attn_implementation``; eager on the CPU, what the memory model assumes there);
    ``simulated`` runs FlashAttention plans with SDPA, whose flash kernel keeps the same tensors (fake tensors cannot
    run the flash-attn package's CUDA kernels). ``zero_attention_dropout`` sets the attention-dropout probability to 0 (the simulator
    needs it to get the CPU's flash kernel). A decoder classifier without a pad token gets the EOS id,
    as users set it (it finds each row's last token by the padding id).
    """
    import transformers

    if raw is None:
        raw = load_config(model.config_path or model.id)[0]
    cfg = dict(raw)
    model_type = cfg.pop("model_type")
    cfg.pop("torch_dtype", None)
    cfg.pop("dtype", None)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    spec = Attention.of(plan.attention).spec
    config._attn_implementation = "sdpa" if simulated and spec.package else spec.implementation
    if model.task == Task.SEQUENCE_CLASSIFICATION and getattr(config, "pad_token_id", None) is None:
        eos = getattr(config, "eos_token_id", None)
        config.pad_token_id = (eos[0] if isinstance(eos, list) else eos) or 0
    if zero_attention_dropout:
        for key in ATTENTION_DROPOUT_KEYS:
            if hasattr(config, key):
                setattr(config, key, 0.0)
    return config


def local_weights_dir(model: ModelProfile) -> Path | None:
    """The folder of the model's config when it also holds weights (a local path or the HF cache), else None."""
    if not model.config_path:
        return None
    folder = Path(model.config_path).parent
    return folder if any((folder / name).exists() for name in WEIGHT_FILES) else None


def _dtype_kwargs(weights_dtype: str | None) -> dict[str, Any]:
    """``from_config`` / ``from_pretrained``'s dtype argument for a :class:`~advisor.core.vocabulary.WeightsDtype` value:
    ``dtype`` from transformers 4.56, ``torch_dtype`` before (nothing for None: fp32, transformers' default for a
    config without a dtype)."""
    if weights_dtype is None:
        return {}
    import torch
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return {key: getattr(torch, WEIGHT_DTYPES[WeightsDtype.of(weights_dtype)])}


def build_model(
    model: ModelProfile, config, *, weights: Path | None = None, weights_dtype: str | None = None, init_device=None
):
    """The task-head model: random weights from ``config``, or ``weights`` (a local folder; never downloads), held
    in ``weights_dtype`` (a :class:`~advisor.core.vocabulary.WeightsDtype` value: 'bf16' is the plan's pure-bf16 model,
    what ``from_pretrained(dtype=torch.bfloat16)`` loads; None or 'fp32': fp32).

    ``init_device`` (a ``torch.device``; None: the CPU): where random weights are created and initialised
    (transformers honours a ``torch.device`` context). On a GPU that takes a fraction of a second, where an 8B
    model's init on the CPU and copy took tens of seconds per trial; the memory peak is the same, the weights."""
    import contextlib

    import torch
    import transformers

    auto = getattr(transformers, Task(model.task).auto_class)
    kwargs = _dtype_kwargs(weights_dtype)
    if weights is not None:
        return auto.from_pretrained(str(weights), config=config, local_files_only=True, **kwargs)
    with torch.device(init_device) if init_device is not None else contextlib.nullcontext():
        return auto.from_config(config, **kwargs)


def apply_adapters(net, model: ModelProfile, plan: Plan):
    """``net`` wrapped in the plan's LoRA adapters (``peft.get_peft_model`` with the ``LoraConfig`` that ``--emit``
    writes: :func:`probes.lora_config.lora_config_kwargs`), its base frozen; ``net`` itself for full fine-tuning.
    PEFT keeps the adapters in fp32 over a 16-bit base (``autocast_adapter_dtype=True``), as the memory model
    prices them.

    Raises:
        UsageError: peft is not installed; attention targets of an unknown model type.
    """
    method = Method.of(plan.method)
    if not method.spec.adapters:
        return net
    try:
        import peft
    except ImportError:
        raise UsageError(f"{method} needs the peft package: pip install peft") from None
    import warnings

    with warnings.catch_warnings():  # PEFT's notes (e.g. GPT-2's Conv1D fan_in_fan_out) are not advisor's
        warnings.simplefilter("ignore")
        return peft.get_peft_model(net, peft.LoraConfig(**lora_config_kwargs(model, plan.lora_rank, plan.lora_targets)))


def build_quantized(model: ModelProfile, config, plan: Plan, device, *, weights: Path | None = None):
    """QLoRA's frozen base on ``device``: bitsandbytes' 4-bit NF4 linear layers (the ``BitsAndBytesConfig`` that
    ``--emit`` writes, :func:`probes.lora_config.bnb_config_kwargs`), the rest in the plan's weights dtype.

    ``weights`` (a local folder): transformers loads and quantizes them (``from_pretrained``). Without: random
    weights made and quantized one tensor at a time on ``device``
    (:func:`advisor.measure.quantized_base.random_quantized`), the model ``from_pretrained`` builds from a
    checkpoint (``tests/measure/test_quantized_trial_base.py`` compares the two on the CPU; a CUDA test there, skipped
    without a GPU); the device never holds more than the 4-bit model and one 16-bit matrix. Before, random weights
    were saved to a temporary folder and loaded back: an 8B model's QLoRA trial took 306 s to start on an H100, and
    16 GB of disk; on this project's 2-core CPU Llama-3.2-1B's base takes 27.8 s this way and took 48.2 s that way.

    Raises:
        UsageError: bitsandbytes is not installed.
    """
    import transformers

    from advisor.measure.quantized_base import missing_reason, random_quantized

    if missing_reason() is not None:
        raise UsageError(missing_reason())
    auto = getattr(transformers, Task(model.task).auto_class)
    dtype = _dtype_kwargs(plan.weights_dtype)
    if weights is None:
        return random_quantized(auto, config, plan, device, dtype)
    return auto.from_pretrained(
        str(weights),
        config=config,
        local_files_only=True,
        device_map={"": device.index or 0 if device.type == Device.CUDA else device.type},
        quantization_config=transformers.BitsAndBytesConfig(
            **bnb_config_kwargs(plan.precision, double_quant=plan.double_quant)
        ),
        **dtype,
    )


def enable_checkpointing(net) -> None:
    """Activation checkpointing, non-reentrant (transformers >= 5 names it ``activation_checkpointing_enable``)."""
    kwargs = {"use_reentrant": False}
    if hasattr(net, "activation_checkpointing_enable"):
        net.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def make_optimizer(params, plan: Plan, *, fused_ok: bool = True, dtensors: bool = False):
    """The plan's optimizer, as the Trainer builds it, from its vocabulary spec
    (:attr:`advisor.core.vocabulary.Optimizer.spec`: ``factory`` class, ``factory_kwargs``, ``learning_rate``).

    AdamW: ``fused=True`` on CUDA (when ``fused_ok``), ``foreach=True`` otherwise (PyTorch
    torch.optim.AdamW, foreach / fused); SGD: ``foreach=True``; Adafactor: transformers' with
    ``scale_parameter=False, relative_step=False`` (Trainer's ``optim="adafactor"``); 8-bit Adam:
    ``bitsandbytes.optim.AdamW8bit`` (Trainer's ``adamw_bnb_8bit``). With ``dtensors`` (the parameters are FSDP2's
    DTensors: a trial sharded with ``fully_shard``) a bitsandbytes optimizer, whose kernels fail on DTensors
    (bitsandbytes issues 1633 and 89), is replaced by the spec's ``dtensor_factory``, the optimizer the emitted files
    run under FSDP2 (``trainer_optim_dtensor``, rule ``optimizer.bitsandbytes-fsdp2``): torchao's ``AdamW8bit`` for
    the 8-bit ones, torch's AdamW for the paged 32-bit one.

    Raises:
        UsageError: an optimizer whose package is missing (8-bit Adam without bitsandbytes, or under FSDP2 without
            torchao).
    """
    optimizer = Optimizer(plan.optimizer)
    spec = optimizer.spec
    stand_in = dtensors and spec.dtensor_factory is not None
    package, factory = (spec.dtensor_package, spec.dtensor_factory) if stand_in else (spec.package, spec.factory)
    if package is not None:
        try:
            importlib.import_module(package)
        except ImportError:
            name = _MISSING_PACKAGE_NAMES.get(optimizer, spec.summary) + (" on FSDP2's DTensors" if stand_in else "")
            raise UsageError(f"{name} needs the {package} package: pip install {package}") from None
    module_name, class_name = factory.split(":")
    kwargs = {} if stand_in else dict(spec.factory_kwargs)
    implementation = optimizer.implementation(plan.device)
    if stand_in:  # torch's AdamW: fused on CUDA; torchao's: its own kernels
        implementation = (
            "fused"
            if factory.startswith("torch.") and plan.device == Device.CUDA
            else "foreach"
            if factory.startswith("torch.")
            else spec.dtensor_implementation
        )
    if implementation == "fused" and not fused_ok:
        implementation = "foreach"
    if implementation in ("fused", "foreach"):  # torch.optim's single-kernel / multi-tensor paths
        kwargs[implementation] = True
    return getattr(importlib.import_module(module_name), class_name)(params, lr=spec.learning_rate, **kwargs)


def autocast_dtype(precision: str):
    """The ``torch.autocast`` dtype of a plan's precision: bf16 / fp16, or None for fp32 (no autocast)."""
    import torch

    return {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}.get(Precision(precision))


def label_kwargs(model: ModelProfile, config, batch: int, seq_len: int, generator=None) -> dict[str, Any]:
    """Random targets for the task head: token labels (LM and seq2seq: the model shifts them into
    decoder inputs), a class per row, or answer start/end positions. Shapes: (b, s), (b,), (b,)."""
    import torch

    kw = {"generator": generator} if generator is not None else {}
    if Task(model.task).language_modeling:
        return {"labels": torch.randint(0, model.vocab_size, (batch, seq_len), **kw)}
    if model.task == Task.SEQUENCE_CLASSIFICATION:
        return {"labels": torch.randint(0, config.num_labels, (batch,), **kw)}
    return {
        "start_positions": torch.randint(0, seq_len, (batch,), **kw),
        "end_positions": torch.randint(0, seq_len, (batch,), **kw),
    }


def synthetic_batch(model: ModelProfile, config, batch: int, seq_len: int, generator=None) -> dict[str, Any]:
    """An unpadded batch: ``input_ids`` (b, s) inside the vocabulary and the task's targets.

    No attention mask, like packed training batches (with a padding mask transformers builds a
    (b, 1, s, s) mask and SDPA leaves its flash kernel). A seq2seq model gets its decoder inputs
    from the labels (shifted right), as in training with ``labels``.
    """
    import torch

    kw = {"generator": generator} if generator is not None else {}
    out = {"input_ids": torch.randint(0, model.vocab_size, (batch, seq_len), **kw)}
    out.update(label_kwargs(model, config, batch, seq_len, generator))
    return out


class SyntheticRows:
    """A map-style dataset of ``n`` synthetic rows (:func:`synthetic_batch`'s, one at a time), each made when the
    DataLoader asks for it from a seed of its own (``seed`` and its index): a trial holds the micro-batches its steps
    are consuming, never all of them (a global batch of 2²² rows of 32 tokens took 3.4 GiB before the first step).
    DataLoader's default collate stacks the rows; workers make their own."""

    def __init__(self, model: ModelProfile, config, n: int, seq_len: int, seed: int = 0) -> None:
        self.model, self.config, self.n, self.seq_len, self.seed = model, config, n, seq_len, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        import torch

        generator = torch.Generator().manual_seed(self.seed * 2**32 + i)
        row = synthetic_batch(self.model, self.config, 1, self.seq_len, generator)
        return {k: v[0] for k, v in row.items()}


def offloading(net, plan: Plan):
    """The context the forward runs in: TRL's activation offloading for a plan with it
    (``trl.models.get_act_offloading_ctx_manager``, what ``SFTConfig(activation_offloading=True)`` builds: pinned
    memory, a side stream, the output head kept on the GPU), else a null context.

    Raises:
        UsageError: the plan offloads activations and TRL is not installed.
    """
    if not plan.activation_offloading:
        return contextlib.nullcontext()
    try:
        from trl.models import get_act_offloading_ctx_manager
    except ImportError as err:
        raise UsageError(f"activation offloading runs TRL's OffloadActivations: pip install trl ({err})") from None
    return get_act_offloading_ctx_manager(net)
