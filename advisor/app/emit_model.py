"""What ``--emit hf`` writes beside ``training_args.json``: how the training script loads the model
(``model_kwargs.json``: ``from_pretrained``'s dtype, attention and QLoRA's ``quantization_config``) and, for
LoRA / QLoRA plans, PEFT's ``LoraConfig`` (``lora_config.json``); and the launch script's notes on both.

Sources: ``from_pretrained``
(https://huggingface.co/docs/transformers/main_classes/model#transformers.PreTrainedModel.from_pretrained: ``dtype``,
``torch_dtype`` before transformers 4.56, ``attn_implementation``, ``quantization_config`` as a dict or a config);
PEFT's ``LoraConfig`` (https://huggingface.co/docs/peft/package_reference/lora) and QLoRA's
``BitsAndBytesConfig``: :mod:`probes.lora_config` (the choices and their sources). transformers 5 loads a model in
its checkpoint's dtype unless told (``dtype="auto"``), so ``model_kwargs.json`` always names the planned dtype.

No torch, transformers or peft import: emitting stays on the fast path.
"""

from __future__ import annotations

from typing import Any

from advisor.core.dimensions import TRL_TARGET, Consumer, runs_only_in
from advisor.core.files import PLAN_FILE  # noqa: F401 (every --emit writes it: advisor.app.emit)
from advisor.engine.recommendation import Recommendation
from probes.lora_config import WEIGHT_DTYPES, bnb_config_kwargs, lora_config_kwargs
from advisor.core.kernels import Attention, LossKernel
from advisor.core.vocabulary import Method, Offload, Parallelism, WeightsDtype

MODEL_KWARGS_FILE = "model_kwargs.json"  #: ``from_pretrained`` keyword arguments (with the ``hf`` target)
LORA_CONFIG_FILE = "lora_config.json"  #: ``peft.LoraConfig`` keyword arguments (``hf`` target, adapter plans)
#: Where ZeRO-Infinity keeps offloaded states: DeepSpeed's documented example path (config-json, "Optimizer
#: offloading"); edit it to a folder on a local NVMe drive.
NVME_PATH = "/local_nvme"
DS_CONFIG_FILE = "ds_config.json"  #: the DeepSpeed config's name (``advisor.app.emit.FILE_NAMES``)
TRAINING_ARGS_FILE = "training_args.json"  #: ``TrainingArguments`` (``--emit hf``)
SFT_CONFIG_FILE = "sft_config.json"  #: TRL's ``SFTConfig`` (``--emit trl``)
#: accelerate's fp8 backend for an fp8 plan: torchao's float8 training (``FP8BackendType.AO``), what the plan is
#: priced with (rule ``stack.fp8``); ``accelerate launch`` turns accelerate_config.yaml's ``fp8_config`` into these
#: variables, the launch scripts export them (``accelerate.utils.launch.setup_fp8_env``, ``Accelerator.fp8_backend``).
FP8_BACKEND = "AO"
FP8_ENV = {"ACCELERATE_MIXED_PRECISION": "fp8", "ACCELERATE_FP8_BACKEND": FP8_BACKEND}


def needs_trl(rec: Recommendation) -> bool:
    """Only TRL's ``SFTConfig`` (``--emit trl``) runs some of the plan's settings as priced (activation offloading, a
    chunked loss: the table of dimensions' ``runs_in``)."""
    return TRL_TARGET in runs_only_in(Consumer.EMIT, rec.plan)


def config_file(rec: Recommendation) -> str:
    """The arguments file the launch scripts hand the training script: ``sft_config.json`` when only TRL runs the
    plan as priced (:func:`needs_trl`), else ``training_args.json``."""
    return SFT_CONFIG_FILE if needs_trl(rec) else TRAINING_ARGS_FILE


def parallelism_sizes(rec: Recommendation) -> dict[str, int | str]:
    """accelerate's ``ParallelismConfig`` of a context-parallel plan ({} otherwise): FSDP2 shards over the
    data-parallel x context-parallel ranks (``dp_shard_size`` x ``cp_size`` = the GPUs), torch's ring attention
    (``cp_backend`` torch). Source: accelerate's ``parallelism_config.py`` and its context-parallelism guide,
    https://huggingface.co/docs/accelerate/concept_guides/context_parallelism; the Trainer reads it from the
    accelerator (``Trainer.get_cp_size``)."""
    plan = rec.plan
    if plan.context_parallel <= 1:
        return {}
    return {"dp_replicate_size": 1, "dp_shard_size": plan.data_parallel_size, "tp_size": 1,
            "cp_size": plan.context_parallel, "cp_backend": "torch"}


def plan_env(rec: Recommendation) -> dict[str, str]:
    """Environment variables the training processes need for the plan, which ``accelerate launch`` would set from
    accelerate_config.yaml: fp8's mixed precision and backend (:data:`FP8_ENV`); context parallelism's
    ``ParallelismConfig`` (``ACCELERATE_USE_PARALLELISM_CONFIG`` and ``PARALLELISM_CONFIG_*``, what accelerate's
    ``ParallelismConfig()`` reads when built without arguments)."""
    env = dict(FP8_ENV) if rec.plan.fp8 else {}
    sizes = parallelism_sizes(rec)
    if sizes:
        env["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true"
        env.update({f"PARALLELISM_CONFIG_{k.upper()}": str(v) for k, v in sizes.items()})
    return env


def transformers_version() -> tuple[int, int]:
    """The installed transformers' (major, minor) version ((4, 0) when it is not installed: the older names work
    on every version)."""
    from importlib import metadata  # ~45 ms of imports: only when a file is written, not for the CLI's parser

    try:
        major, minor = metadata.version("transformers").split(".")[:2]
        return int(major), int(minor)
    except (metadata.PackageNotFoundError, ValueError):
        return 4, 0


def _dtype_key() -> str:
    """transformers 4.56 renamed ``from_pretrained``'s ``torch_dtype`` to ``dtype`` (the old name still loads, with a
    deprecation warning); older versions know only ``torch_dtype``."""
    return "dtype" if transformers_version() >= (4, 56) else "torch_dtype"


def model_kwargs(rec: Recommendation) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments of the plan's model (load with
    ``AutoModelFor...from_pretrained(model_id, **json.load(open("model_kwargs.json")))``).

    The dtype the memory model priced (``bfloat16``: pure bf16, no fp32 master copy; ``float32``: AMP's fp32
    weights), the plan's attention kernel (``attn_implementation``, :class:`advisor.core.kernels.AttentionSpec`), and for QLoRA the ``quantization_config`` (``BitsAndBytesConfig`` keyword arguments,
    :func:`probes.lora_config.bnb_config_kwargs`; ``from_pretrained`` takes the dict as it is). The 4-bit weights
    are stored in the compute dtype when ZeRO-3 / FSDP shard them.
    """
    plan = rec.plan
    kwargs: dict[str, Any] = {_dtype_key(): WEIGHT_DTYPES[WeightsDtype.of(plan.weights_dtype)],
                              "attn_implementation": Attention.of(plan.attention).spec.implementation}
    if Method.of(plan.method).spec.quantized_base:
        sharded = Parallelism.of(plan.parallelism).stage >= 3
        kwargs["quantization_config"] = bnb_config_kwargs(plan.precision, sharded_base=sharded,
                                                          double_quant=plan.double_quant)
    return kwargs


def lora_config(rec: Recommendation) -> dict[str, Any] | None:
    """``peft.LoraConfig`` keyword arguments of a LoRA / QLoRA plan (None for full fine-tuning): the plan's rank
    and targets, alpha 2·r, dropout 0 (:func:`probes.lora_config.lora_config_kwargs`).

    Raises:
        UsageError: attention-only adapters for a model type advisor has no projection names for.
    """
    plan = rec.plan
    if not Method.of(plan.method).spec.adapters:
        return None
    return lora_config_kwargs(rec.model, plan.lora_rank, plan.lora_targets)


def load_notes(rec: Recommendation) -> list[str]:
    """Comment lines: how the training script loads the model (``model_kwargs.json``), wraps it in the adapters
    (``lora_config.json``), where ZeRO-Infinity offloads, how to offload activations (TRL's ``activation_offloading``) and
    how to run the optimizer step in backward (torchtune's ``optimizer_in_bwd``; the Trainer has none)."""
    plan = rec.plan
    dtype = WEIGHT_DTYPES[WeightsDtype.of(plan.weights_dtype)]
    lines = [f"# Check the run against {PLAN_FILE} (the plan priced): Trainer(..., callbacks=[advisor.integrations."
             f"AdvisorCallback(\"{PLAN_FILE}\")]), or advisor.integrations.track(\"{PLAN_FILE}\") in a plain loop.",
             f"# Load the model with the arguments of {MODEL_KWARGS_FILE} (--emit hf): "
             f"from_pretrained(model_id, **json.load(open(\"{MODEL_KWARGS_FILE}\"))), in {dtype}"
             + (" (pure bf16: no fp32 master copy)" if plan.weights_dtype == WeightsDtype.BF16 else "")
             + (" (the frozen base in fp16; PEFT keeps the adapters in fp32)" if plan.weights_dtype == WeightsDtype.FP16
                else "")
             + (", the base in 4-bit NF4 (bitsandbytes)" if Method.of(plan.method).spec.quantized_base else "") + "."]
    if Method.of(plan.method).spec.adapters:
        lines.append(f"# Then train {plan.method} adapters (rank {plan.lora_rank}, {plan.lora_targets}): model = "
                     f"peft.get_peft_model(model, peft.LoraConfig(**json.load(open(\"{LORA_CONFIG_FILE}\")))).")
    if plan.packing:
        lines.append("# Pack samples padding-free: data_collator=transformers.DataCollatorWithFlattening() (or TRL's "
                     "SFTConfig(padding_free=True)); FlashAttention attends within each sample.")
    if plan.fp8:
        lines += ["# fp8: accelerate (mixed_precision fp8, torchao backend) converts every nn.Linear whose sizes divide "
                  "by 16 to Float8Linear but the model's",
                  "# first and last (the first block's first projection, the LM head); attention's own matmuls, norms, "
                  "embeddings and the loss stay bf16. Validate the loss curve."]
    if needs_trl(rec):
        lines += [f"# Train with TRL (--emit trl writes {SFT_CONFIG_FILE}; the HF Trainer has no option for "
                  "activation offloading or a chunked loss):",
                  f"#   SFTTrainer(model=model_id, args=HfArgumentParser(SFTConfig).parse_json_file(\"{SFT_CONFIG_FILE}\")[0], "
                  "train_dataset=...[, peft_config=...])"]
    if plan.loss_kernel == LossKernel.CHUNKED:
        lines.append("# The loss in chunks: TRL's SFTTrainer computes it through its fused LM head, torchtune with "
                     "CEWithChunkedOutputLoss.")
    if plan.activation_offloading:
        lines += ["# Activations offloaded to CPU RAM: SFTConfig(activation_offloading=True), torchtune's "
                  "enable_activation_offloading: True, or in your own loop",
                  "#   with trl.models.get_act_offloading_ctx_manager(model): loss = model(**batch).loss"]
    if Offload.of(plan.offload).nvme:
        lines.append(f"# {DS_CONFIG_FILE} offloads to NVMe under {NVME_PATH}: edit nvme_path to a folder "
                     "on a local NVMe drive.")
    if plan.optimizer_in_backward:
        lines += ["# The plan runs the optimizer step in backward, which the HF Trainer has no option for: use torchtune's "
                  "full fine-tuning recipe with",
                  "#   optimizer_in_bwd: True, gradient_accumulation_steps: 1, clip_grad_norm: null",
                  "# or in your own loop one optimizer per parameter stepped by "
                  "param.register_post_accumulate_grad_hook",
                  "# (https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html)."]
    return lines
