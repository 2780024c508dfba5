"""How ``estimate`` and ``validate`` turn the flags they are given into the plan they price or run: the defaults of the
settings not given, a micro-batch or an accumulation alone that keeps the global batch, and how a trial names a
strategy it runs in another's place."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from advisor.app.options import ESTIMATE_DEFAULTS, PlanOptions
from probes.checkpoint import planned_double_quant
from advisor.core.errors import UsageError
from advisor.core.limits import MAX_GLOBAL_BATCH_SIZE, MAX_GPUS_PER_NODE, MAX_LAYERS, MAX_NODES, MAX_WIDTH
from advisor.core.kernels import Attention, Framework
from advisor.core.vocabulary import Device, Method, Offload, Parallelism, Precision, WeightsDtype
from rules import Facts, Plan
from rules.stack import installed_legacy_bitsandbytes
from advisor.core.dimensions import ADAPTER_SHAPE, BATCH


def given_settings(opts: BaseModel) -> dict[str, Any]:
    """The plan settings among validated options that the user gave (not None)."""
    return {name: getattr(opts, name) for name in PlanOptions.model_fields if getattr(opts, name) is not None}


def require_adapters_for(opts: BaseModel, method: str | None, from_scratch: bool = False) -> None:
    """Refuse the adapters' shape (``--lora-rank``, ``--lora-targets``) given for a plan without adapters: full
    fine-tuning or pre-training (``method`` None: the planner's choice, which may be adapters).

    Raises:
        UsageError: an adapter flag given with ``--method full`` or ``--from-scratch``.
    """
    given = [name for name in ADAPTER_SHAPE if getattr(opts, name, None) is not None]
    if not given:
        return
    flag = "--" + given[0].replace("_", "-")
    if from_scratch:
        raise UsageError(f"{flag} shapes LoRA / QLoRA adapters, and pre-training (--from-scratch) trains every weight")
    if method is not None and not Method.of(method).spec.adapters:
        raise UsageError(
            f"{flag} shapes LoRA / QLoRA adapters, and this plan trains every weight (--method "
            f"{method}): give --method lora or qlora, or leave {flag} out"
        )


def estimate_plan(facts: Facts, settings: dict[str, Any]) -> Plan:
    """The plan ``estimate`` prices: the given settings, :data:`ESTIMATE_DEFAULTS` for the rest, precision bf16
    where the GPU has it (fp16 on other tensor-core GPUs, fp32 otherwise), tf32 where supported (a tf32 the
    GPU lacks is off), bf16 weights for LoRA / QLoRA under bf16 (else fp32), parallelism 'ddp' over several
    replicas (else 'none'; with an offload, the ZeRO stage that offloads it), QLoRA's 4-bit backward as this
    machine's bitsandbytes runs it (:func:`rules.stack.installed_legacy_bitsandbytes`), QLoRA's double quantization
    as a pre-quantized checkpoint stores it (:func:`probes.checkpoint.planned_double_quant`), and the device's default
    attention (:meth:`Attention.default`) where transformers' code for the model has it, eager where not (MPT, say).
    """
    g = facts.gpu
    s = {**ESTIMATE_DEFAULTS, "double_quant": planned_double_quant(facts.model.quantization), **settings}
    default = Attention.default(Device.CPU if g is None else Device.CUDA)
    if (
        "attention" not in settings
        and s.get("framework", Framework.TRANSFORMERS) == Framework.TRANSFORMERS
        and default not in facts.model.attention_kernels
    ):
        s["attention"] = Attention.EAGER
    if "precision" not in settings:
        s["precision"] = (
            Precision.FP32 if g is None or not g.tensor_cores else (Precision.BF16 if g.bf16 else Precision.FP16)
        )
    tf32_here = bool(g is not None and g.tf32)
    s["tf32"] = tf32_here and s.get("tf32", True) is not False
    if "weights_dtype" not in settings:  # adapters' frozen base loads in the 16-bit compute dtype (torch_dtype)
        adapters = Method.of(s.get("method", Method.FULL)).spec.adapters
        sixteen = {Precision.BF16: WeightsDtype.BF16, Precision.FP16: WeightsDtype.FP16}
        s["weights_dtype"] = (
            sixteen.get(Precision.of(s["precision"]), WeightsDtype.FP32) if adapters else WeightsDtype.FP32
        )
    if "legacy_bitsandbytes" not in settings:  # QLoRA on this machine: its bitsandbytes' backward
        s["legacy_bitsandbytes"] = installed_legacy_bitsandbytes(facts)
    gpus = facts.hardware.num_gpus
    if "parallelism" not in settings:
        replicas = gpus // (s["tensor_parallel"] * s["pipeline_parallel"]) if gpus else 1
        s["parallelism"] = Parallelism.DDP if replicas > 1 else Parallelism.NONE
        offload = Offload.of(s["offload"])
        if offload.optimizer:  # ZeRO-Offload: stage 2 offloads the optimizer, stage 3 the parameters too
            s["parallelism"] = Parallelism.ZERO_3 if offload.parameters else Parallelism.ZERO_2
    return Plan(device=Device.CPU if g is None else Device.CUDA, num_gpus=gpus, **s)


#: The counts of a plan and their bounds (those of the options: :mod:`advisor.core.limits`).
PLAN_BOUNDS = {
    "micro_batch_size": (1, MAX_GLOBAL_BATCH_SIZE),
    "gradient_accumulation_steps": (1, MAX_GLOBAL_BATCH_SIZE),
    "num_gpus": (0, MAX_GPUS_PER_NODE * MAX_NODES),
    "cpu_processes": (1, MAX_GPUS_PER_NODE),
    "tensor_parallel": (1, MAX_GPUS_PER_NODE),
    "pipeline_parallel": (1, MAX_NODES),
    "lora_rank": (1, MAX_WIDTH),
    "expert_parallel": (1, MAX_GPUS_PER_NODE * MAX_NODES),
    "virtual_pipeline": (1, MAX_LAYERS),
}


def require_plan_counts(plan: Plan, where: str = "") -> None:
    """Refuse a plan (a ``--plan`` file's, or one the API is given) with a count outside :data:`PLAN_BOUNDS` (a
    micro-batch of 0, an expert parallel degree of -3), before anything divides by it.

    Raises:
        UsageError: ``<where>plan.<name> must be from <least> to <most>, got <value>``.
    """
    for name, (least, most) in PLAN_BOUNDS.items():
        value = getattr(plan, name)
        if not least <= value <= most:
            raise UsageError(f"{where}plan.{name} must be from {least} to {most}, got {value}")


def require_bounded_batch(plan: Plan, where: str = "") -> None:
    """Refuse a plan whose global batch (micro-batch × accumulation × data-parallel size, each bounded on its own) is
    beyond :data:`advisor.core.limits.MAX_GLOBAL_BATCH_SIZE`: the product of counts within their limits is not.

    Raises:
        UsageError: one line with the product (``where``: what the plan came from, e.g. ``--plan FILE: ``).
    """
    if plan.global_batch_size > MAX_GLOBAL_BATCH_SIZE:
        raise UsageError(
            f"{where}micro-batch {plan.micro_batch_size:,} x accumulation "
            f"{plan.gradient_accumulation_steps:,} x data-parallel {plan.data_parallel_size:,} = a global "
            f"batch of {plan.global_batch_size:,} samples, more than the largest advisor takes "
            f"({MAX_GLOBAL_BATCH_SIZE:,})"
        )


def split_batch(gbs: int, overrides: dict[str, Any], replicas: int = 1) -> dict[str, Any]:
    """The micro-batch and accumulation that make the global batch ``gbs`` over ``replicas`` data-parallel replicas
    (:attr:`advisor.core.plan.Plan.data_parallel_size`): a micro-batch alone keeps it by changing the accumulation, and
    the other way round; both must agree with it.

    Raises:
        UsageError: ``gbs`` does not split over the replicas, the given value does not divide each replica's batch,
            or micro-batch × accumulation × replicas is not ``gbs``.
    """
    if gbs % replicas:
        raise UsageError(f"--global-batch-size {gbs} does not split over {replicas} data-parallel replicas")
    per = gbs // replicas
    where = f"the global batch {gbs}" + (
        f" over {replicas} data-parallel replicas ({per} each)" if replicas > 1 else ""
    )
    for given, derived in (BATCH, BATCH[::-1]):
        if given in overrides and derived not in overrides:
            if per % overrides[given]:
                raise UsageError(f"--{given.replace('_', '-')} {overrides[given]} does not divide {where}")
            return {**overrides, derived: per // overrides[given]}
    micro, steps = overrides.get("micro_batch_size"), overrides.get("gradient_accumulation_steps")
    if micro is not None and steps is not None and micro * steps != per:
        times = f" × {replicas} replicas" if replicas > 1 else ""
        raise UsageError(
            f"--micro-batch-size {micro} × --gradient-accumulation-steps {steps}{times} = "
            f"{micro * steps * replicas} samples, not the global batch {gbs}: give two of the three, or "
            "three that agree"
        )
    return overrides
