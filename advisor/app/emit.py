"""Ready-to-run configs from one recommendation: Hugging Face ``TrainingArguments`` with the model's
load arguments (and, for LoRA / QLoRA, PEFT's ``LoraConfig``), an accelerate config, a DeepSpeed config
(when ZeRO is planned) and a torchrun launch script.

Every value comes from the :class:`~advisor.engine.recommendation.Recommendation` (its ``plan`` for the
searched settings, its ``settings`` for the rule-set ones), so the files cannot disagree with it
or with each other. Sources of the formats:

- ``TrainingArguments``: https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments
  (``optim`` names: ``transformers.training_args.OptimizerNames``, the paged ones included);
- the load arguments: ``from_pretrained``'s ``dtype`` (``torch_dtype`` before transformers 4.56),
  ``attn_implementation`` and ``quantization_config``
  (https://huggingface.co/docs/transformers/main_classes/model#transformers.PreTrainedModel.from_pretrained);
  TrainingArguments has no dtype, so they get their own file. transformers 5 loads in the checkpoint's
  dtype by default (``dtype="auto"``), so the file always names the planned one;
- PEFT's ``LoraConfig`` (https://huggingface.co/docs/peft/package_reference/lora) and the
  ``BitsAndBytesConfig`` of QLoRA: :mod:`probes.lora_config` (its choices and their sources);
- accelerate: https://huggingface.co/docs/accelerate/package_reference/cli#accelerate-config (the
  YAML that ``accelerate config`` writes, loaded by ``accelerate.commands.config.config_args.ClusterConfig``);
- DeepSpeed: :mod:`advisor.app.emit_deepspeed`; TRL's SFTConfig: :mod:`advisor.app.emit_trl`; Slurm:
  :mod:`advisor.app.emit_slurm`;
- torchrun: https://pytorch.org/docs/stable/elastic/run.html (``--nnodes``, ``--nproc-per-node``,
  ``--node-rank``, ``--master-addr``, ``--master-port``).

No torch, transformers or accelerate import: emitting stays on the fast path.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path
from typing import Any

from advisor.app.emit_deepspeed import deepspeed_config
from advisor.app.emit_schedule import schedule_args
from advisor.app.emit_slurm import SLURM_FILE, slurm_script
from advisor.app.emit_trl import sft_config
from advisor.app.emit_model import (DS_CONFIG_FILE, FP8_BACKEND, FP8_ENV, LORA_CONFIG_FILE, MODEL_KWARGS_FILE,
                                    PLAN_FILE, SFT_CONFIG_FILE, TRAINING_ARGS_FILE, lora_config, model_kwargs,
                                    needs_trl, parallelism_sizes, transformers_version)
from advisor.app.emit_model import NVME_PATH  # noqa: F401  (read here by callers and tests)
from advisor.app.files import check_target, write_set
from advisor.app.manifest import MANIFEST_FILE, plan_folder
from advisor.app.emit_train import TRAIN_FILE, train_script
from advisor.app.launch import LAUNCH_FILE, MASTER_PORT, launch_script  # noqa: F401 (emit's API)
from advisor.engine.recommendation import Recommendation
from advisor.core.dimensions import TRL_TARGET, Consumer, Setting, refusal
from advisor.core.errors import OutputError, UsageError
from advisor.core.kernels import LossKernel
from advisor.core.vocabulary import Device, Method, Offload, Optimizer, Parallelism, Precision

TARGETS = ("hf", "accelerate", "deepspeed", "torchrun", TRL_TARGET, "slurm")
FILE_NAMES = {"hf": TRAINING_ARGS_FILE, "accelerate": "accelerate_config.yaml", "deepspeed": DS_CONFIG_FILE,
              "torchrun": LAUNCH_FILE, TRL_TARGET: SFT_CONFIG_FILE, "slurm": SLURM_FILE}
#: every file a target may write (``hf``: the load arguments and, for adapters, PEFT's config too; ``trl`` PEFT's too;
#: every target the plan they were made from, :data:`PLAN_FILE`)
GROUPS = {t: (*names, PLAN_FILE) for t, names in {**{t: (name,) for t, name in FILE_NAMES.items()},
          "hf": (TRAINING_ARGS_FILE, MODEL_KWARGS_FILE, LORA_CONFIG_FILE, TRAIN_FILE),
          TRL_TARGET: (SFT_CONFIG_FILE, LORA_CONFIG_FILE, TRAIN_FILE)}.items()}

#: ``recommend --emit``'s help: the targets, their files, and what ``all`` writes.
EMIT_HELP = ("also write ready-to-run configs: hf (training_args.json, model_kwargs.json, and lora_config.json for LoRA "
             "/ QLoRA), accelerate (accelerate_config.yaml), deepspeed (ds_config.json, ZeRO plans), torchrun "
             "(launch.sh), trl (TRL's SFTConfig: sft_config.json; runs activation offloading and a chunked loss), "
             "slurm (launch.slurm: srun + torchrun, one task per node) or all (every target the plan uses: deepspeed "
             "with ZeRO, slurm on several nodes); repeatable (default: none)")


def _parallelism(rec: Recommendation) -> Parallelism:
    return Parallelism(rec.plan.parallelism)


def uses_deepspeed(rec: Recommendation) -> bool:
    """ZeRO stages (and their offload) run on DeepSpeed."""
    return _parallelism(rec).deepspeed


def uses_fsdp(rec: Recommendation) -> bool:
    """The plan shards with PyTorch FSDP."""
    return _parallelism(rec).fsdp


def zero_stage(rec: Recommendation) -> int:
    """The ZeRO stage of the plan (0 without ZeRO)."""
    return _parallelism(rec).stage if uses_deepspeed(rec) else 0


def shards_dtensors(rec: Recommendation) -> bool:
    """The emitted files run FSDP2, whose parameters are DTensors (transformers >= 5 and a plan that runs FSDP2)."""
    return uses_fsdp(rec) and rec.plan.runs_fsdp2 and _transformers_major() >= 5


def optim_name(rec: Recommendation) -> str:
    """The ``TrainingArguments.optim`` value (an ``OptimizerNames`` member) of the plan's optimizer: the fused
    name where the recommendation chose the fused implementation; under FSDP2 a bitsandbytes optimizer's DTensor-capable
    stand-in with the same states (torchao's AdamW8bit, ``adamw_torch_8bit``: rule ``optimizer.bitsandbytes-fsdp2``)."""
    spec = Optimizer(rec.plan.optimizer).spec
    if spec.trainer_optim_dtensor and shards_dtensors(rec):
        return spec.trainer_optim_dtensor
    fused = rec.value(Setting.OPTIMIZER_IMPLEMENTATION) == "fused" and rec.plan.device == Device.CUDA
    return spec.trainer_optim_fused if fused and spec.trainer_optim_fused else spec.trainer_optim


def _transformers_major() -> int:
    """The installed transformers' major version (4 when it is not installed)."""
    return transformers_version()[0]


def _checkpointing_key() -> str:
    """transformers 5 renamed ``gradient_checkpointing`` to ``activation_checkpointing`` (the old name
    warns and goes in v6); older versions know only the old one."""
    return "activation_checkpointing" if _transformers_major() >= 5 else "gradient_checkpointing"


def _fsdp_args(rec: Recommendation) -> dict[str, Any]:
    """TrainingArguments' FSDP keys. transformers >= 5: ``fsdp=True`` with ``fsdp_config`` (FSDP2, the plan's
    ``fsdp_version`` 2: ``reshard_after_forward`` True for FULL_SHARD, False for SHARD_GRAD_OP; FSDP1, ``version: 1``,
    for ``fsdp_version`` 1 and HYBRID_SHARD: :attr:`advisor.core.plan.Plan.runs_fsdp2`), and FSDP's own activation
    checkpointing; before 5: the option string, FSDP1 (TrainingArguments docs, "fsdp")."""
    plan, spec = rec.plan, _parallelism(rec).spec
    offload = plan.offload != Offload.NONE
    if _transformers_major() < 5:
        return {"fsdp": " ".join([spec.fsdp_option, "auto_wrap"] + (["offload"] if offload else []))}
    if not plan.runs_fsdp2:  # QLoRA: FSDP1 without orig params, as the measured recipes (rule method.qlora-fsdp1)
        config: dict[str, Any] = {"version": 1, "reshard_after_forward": spec.fsdp_option,
                                  "use_orig_params": not Method.of(plan.method).spec.quantized_base}
    else:
        config = {"version": 2, "reshard_after_forward": spec.stage >= 3}
    config["cpu_offload"] = offload
    if plan.gradient_checkpointing:
        config["activation_checkpointing"] = True  # FSDP's own: no redundant all-gather in backward
    return {"fsdp": True, "fsdp_config": config}


def training_args(rec: Recommendation, tokens: int | None = None) -> dict[str, Any]:
    """``TrainingArguments`` keyword arguments (load with ``HfArgumentParser(TrainingArguments).parse_json_file``); the
    learning rate, warm-up and run length (``max_steps`` for ``tokens``): :mod:`advisor.app.emit_schedule`.

    The stack: ``torch_compile``, ``use_liger_kernel`` (Liger's kernels; ``liger_kernel_config`` turns its fused loss
    off for ``--loss-kernel liger-layers``), and for padding-free packing ``remove_unused_columns=False`` (the
    collator, ``DataCollatorWithFlattening``, needs the ``input_ids`` as they are; launch.sh's comments say so); the
    attention kernel is ``model_kwargs.json``'s ``attn_implementation``. ``output_dir``: from where the run starts.

    An fp8 plan leaves ``bf16`` off: the Trainer then runs accelerate's ``mixed_precision`` from the environment,
    ``fp8`` (:data:`FP8_ENV`, set by ``accelerate launch`` from accelerate_config.yaml or by launch.sh), which converts
    the linear layers to torchao's ``Float8Linear`` and autocasts the rest in bf16.

    Activation checkpointing is ``gradient_checkpointing`` before transformers 5 and ``activation_checkpointing`` from
    5 on (the installed version decides), non-reentrant. ``optim`` is the optimizer spec's Trainer name
    (``paged_adamw_8bit``, ...); ``bf16`` is on with bf16 weights too (they compute in bf16); the load dtype is in
    :func:`model_kwargs` (TrainingArguments has none).
    """
    plan, ckpt = rec.plan, _checkpointing_key()
    args: dict[str, Any] = {
        "output_dir": "output",
        "per_device_train_batch_size": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.gradient_accumulation_steps,
        # fp8: bf16 off, so that the Trainer takes accelerate's mixed precision (fp8) from ACCELERATE_MIXED_PRECISION
        # (TrainingArguments.mixed_precision: bf16=True would override it); fp8 autocasts the rest in bf16
        "bf16": plan.precision == Precision.BF16 and not plan.fp8,
        "fp16": plan.precision == Precision.FP16,
        ckpt: plan.gradient_checkpointing,
        "optim": optim_name(rec),
        "dataloader_num_workers": rec.value(Setting.DATALOADER_NUM_WORKERS),
        "dataloader_pin_memory": rec.value(Setting.DATALOADER_PIN_MEMORY),
        "torch_compile": plan.torch_compile,
    }
    args.update(schedule_args(rec, _transformers_major(), tokens))
    spec = Optimizer.of(plan.optimizer).spec
    if spec.trainer_optim_args:  # e.g. SGD's momentum, which the Trainer's SGD would leave at 0
        args["optim_args"] = ",".join(f"{key}={value}" for key, value in spec.factory_kwargs.items())
    if (liger := LossKernel.of(plan.loss_kernel).spec).fused_layers:
        args |= {"use_liger_kernel": True} | ({"liger_kernel_config": dict(liger.liger_config)} if liger.liger_config
                                              else {})
    if plan.packing:  # padding-free packing: TRL's SFTConfig(padding_free=True) or DataCollatorWithFlattening
        args["remove_unused_columns"] = False
    if plan.gradient_checkpointing:
        args[f"{ckpt}_kwargs"] = {"use_reentrant": False}
    if plan.device == Device.CUDA:
        args["tf32"] = plan.tf32
    else:
        args["use_cpu"] = True
    if uses_deepspeed(rec):
        args["deepspeed"] = FILE_NAMES["deepspeed"]
    if uses_fsdp(rec):
        args.update(_fsdp_args(rec))
        if plan.gradient_accumulation_steps > 1:
            # reduce-scatter every micro-batch: gradients stay sharded, as the memory figure assumed (the Trainer's
            # default no_sync would keep full gradients; advisor.engine.speed.communication_seconds)
            args["accelerator_config"] = {"gradient_accumulation_kwargs": {"sync_each_batch": True}}
        if "fsdp_config" in args and plan.gradient_checkpointing:
            args[ckpt] = False  # the fsdp_config's activation checkpointing replaces it
            args.pop(f"{ckpt}_kwargs", None)
    return args


def accelerate_config(rec: Recommendation) -> dict[str, Any]:
    """The YAML mapping ``accelerate config`` would write for the plan."""
    plan, hw = rec.plan, rec.hardware
    if plan.device == Device.CPU:
        distributed = "NO"
    elif uses_deepspeed(rec):
        distributed = "DEEPSPEED"
    elif uses_fsdp(rec):
        distributed = "FSDP"
    elif plan.num_gpus > 1:
        distributed = "MULTI_GPU"
    else:
        distributed = "NO"
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": distributed,
        "downcast_bf16": "no",
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": _mixed_precision(rec),
        "num_machines": hw.nodes,
        "num_processes": max(plan.num_gpus, 1),
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": plan.device == Device.CPU,
    }
    if plan.device == Device.CUDA:
        config["gpu_ids"] = "all"
    if hw.nodes > 1:
        config["main_process_ip"] = None  # the launch script passes --main_process_ip / MASTER_ADDR
        config["main_process_port"] = MASTER_PORT
    if uses_deepspeed(rec):
        config["deepspeed_config"] = {"deepspeed_config_file": FILE_NAMES["deepspeed"],
                                      "zero3_init_flag": zero_stage(rec) == 3}
    if uses_fsdp(rec):  # FSDP2 reads the strategy as reshard_after_forward; prefetch and orig params are FSDP1's
        config["fsdp_config"] = {
            "fsdp_version": 2 if plan.runs_fsdp2 else 1,
            "fsdp_sharding_strategy": _parallelism(rec).spec.fsdp_strategy,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_offload_params": plan.offload != Offload.NONE,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_sync_module_states": True,
            # accelerate refuses torchao's fp8 with FSDP2's RAM-efficient loading (Accelerator.__init__)
            "fsdp_cpu_ram_efficient_loading": not plan.fp8,
            **({} if plan.runs_fsdp2 else {"fsdp_backward_prefetch": "BACKWARD_PRE",
                                           "fsdp_use_orig_params": not Method.of(plan.method).spec.quantized_base}),
        }
    if rec.plan.torch_compile:
        config["dynamo_config"] = {"dynamo_backend": "INDUCTOR"}
    if plan.fp8:  # accelerate's torchao backend converts the linear layers (accelerate.utils.ao.convert_model_to_fp8_ao)
        config["fp8_config"] = {"backend": FP8_BACKEND}
    sizes = parallelism_sizes(rec)  # context parallel: accelerate launch sets ParallelismConfig from these
    if sizes:
        config["parallelism_config"] = {f"parallelism_config_{k}": v for k, v in sizes.items()}
    return config


def _mixed_precision(rec: Recommendation) -> str:
    """accelerate's ``mixed_precision``: ``fp8`` for an fp8 plan (under bf16 autocast), the plan's 16-bit precision,
    or ``no``."""
    plan = rec.plan
    if plan.fp8:
        return FP8_ENV["ACCELERATE_MIXED_PRECISION"]
    return plan.precision if Precision(plan.precision).mixed else "no"


def wanted_targets(rec: Recommendation, targets: list[str]) -> list[str]:
    """The targets to write: those asked for, or with ``all`` every target that applies to the plan (DeepSpeed's
    config only for ZeRO, the Slurm script only on several nodes).

    Raises:
        UsageError: an unknown target; ``deepspeed`` without ZeRO; ``hf`` without ``trl`` for a plan only TRL's
            SFTConfig runs as priced (activation offloading, a chunked loss).
    """
    if "all" in targets:
        return [t for t in TARGETS if (t != "deepspeed" or uses_deepspeed(rec)) and (t != "slurm" or
                                                                                    rec.hardware.nodes > 1)]
    wanted = list(dict.fromkeys(targets))
    unknown = [t for t in wanted if t not in TARGETS]
    if unknown:
        raise UsageError(f"--emit {unknown[0]}: choose from {', '.join(TARGETS)} or all")
    if "deepspeed" in wanted and not uses_deepspeed(rec):
        raise UsageError(f"--emit deepspeed: the plan uses {rec.plan.parallelism}, not ZeRO, so it needs no "
                         "DeepSpeed config")
    if "hf" in wanted and TRL_TARGET not in wanted and needs_trl(rec):
        raise UsageError(f"--emit hf: {rec.hand_off} (the Trainer has no option for them): add --emit {TRL_TARGET}")
    return wanted


def render(rec: Recommendation, targets: list[str], tokens: int | None = None) -> dict[str, str]:
    """File name → text for the targets (:func:`wanted_targets`). ``hf`` writes ``training_args.json``,
    ``model_kwargs.json`` and, for LoRA / QLoRA, ``lora_config.json``; ``trl`` ``sft_config.json`` (and
    ``lora_config.json``); ``torchrun`` ``launch.sh``; ``slurm`` ``launch.slurm``; every set ``plan.json``, the
    recommendation (:data:`PLAN_FILE`: what ``advisor.integrations`` checks the run against). ``tokens``: the run's
    length in tokens (``max_steps``; None: the recommendation's epochs).

    Raises:
        UsageError: ``tokens`` not a whole number in range, an inapplicable target (:func:`wanted_targets`), a tensor / pipeline / expert parallel plan, a
            plan priced for another framework than transformers, or attention-only adapters on a model type without
            known projection names.
    """
    refused = refusal(Consumer.EMIT, rec.plan)  # the settings no emitted file runs (the table's rows)
    if refused is not None:
        raise UsageError(refused)
    files: dict[str, str] = {}
    wanted = wanted_targets(rec, targets)
    for target in wanted:
        name = FILE_NAMES[target]
        if target in ("hf", TRL_TARGET):
            args = training_args(rec, tokens)
            files[name] = json.dumps(args if target == "hf" else sft_config(rec, args), indent=2) + "\n"
            if target == "hf":
                files[MODEL_KWARGS_FILE] = json.dumps(model_kwargs(rec), indent=2) + "\n"
            adapters = lora_config(rec)
            if adapters is not None:
                files[LORA_CONFIG_FILE] = json.dumps(adapters, indent=2) + "\n"
        elif target == "accelerate":
            import yaml

            files[name] = yaml.safe_dump(accelerate_config(rec), sort_keys=True)
        elif target == "deepspeed":
            files[name] = json.dumps(deepspeed_config(rec), indent=2) + "\n"
        elif target == "slurm":
            files[name] = slurm_script(rec)
        else:
            files[name] = launch_script(rec)
    if {"hf", TRL_TARGET} & set(wanted):
        files[TRAIN_FILE] = train_script(rec)  # reads the files above and trains with them
    files[PLAN_FILE] = rec.model_dump_json(indent=2) + "\n"  # what the training callback checks the run against
    return files


def check_targets(targets: list[str], out_dir: str | Path = ".") -> None:
    """Refuse, before the recommendation is computed, an ``--out`` folder or an ``--emit`` file that could not be
    written: a folder path that is a file, a file name taken by a directory or a device (see
    :func:`advisor.app.files.check_target`). A folder that does not exist yet is fine: :func:`emit` creates it.

    Raises:
        OutputError: one line naming the path.
    """
    folder = Path(out_dir)
    try:
        mode = folder.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as err:  # a name too long, a file in the path, a loop of links: exit 7, not an internal error
        raise OutputError(f"cannot write into --out {shlex.quote(str(folder))}: {err.strerror}") from None
    if not stat.S_ISDIR(mode):
        raise OutputError(f"cannot write into --out {shlex.quote(str(folder))}: it is not a folder")
    wanted = TARGETS if "all" in targets else [t for t in targets if t in TARGETS]
    for name in dict.fromkeys([name for t in wanted for name in GROUPS[t]] + [MANIFEST_FILE]):
        check_target(folder / name)


def emit(rec: Recommendation, targets: list[str], out_dir: str | Path = ".", tokens: int | None = None) -> list[Path]:
    """Write the targets' files into ``out_dir`` (created if missing), all or nothing; the launch scripts executable.
    The folder's manifest (:mod:`advisor.app.manifest`) lists what advisor wrote there, and the files of an earlier
    set of the same targets that this one does not write (``lora_config.json`` after a full fine-tuning plan) are
    removed. ``tokens``: the run's length (:func:`render`).

    Returns:
        The written paths (the manifest last).
    Raises:
        UsageError: not a Recommendation, targets that are not a list of names, an unknown or inapplicable target,
            ``tokens`` out of range.
        OutputError: a folder that cannot be created or written, a target that is not a regular file, a failed
            write or rename (no file of the set is then changed).
    """
    if not isinstance(rec, Recommendation):
        raise UsageError(f"emit needs a Recommendation (from recommend), got {type(rec).__name__}")
    if not isinstance(targets, (list, tuple)) or not targets or not all(isinstance(t, str) for t in targets):
        raise UsageError(f"emit's targets must be a list of {', '.join(TARGETS)} or all, got {targets!r:.80}")
    if not isinstance(out_dir, (str, os.PathLike)):
        raise UsageError(f"emit's out_dir must be a folder path, got {type(out_dir).__name__}")
    files = render(rec, targets, tokens)
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create --out {shlex.quote(str(folder))}: {err.strerror}") from None
    stale, manifest = plan_folder(folder, GROUPS, wanted_targets(rec, targets), list(files))
    return write_set({folder / name: text for name, text in files.items()} | {folder / MANIFEST_FILE: manifest},
                     executable={folder / FILE_NAMES["torchrun"], folder / FILE_NAMES["slurm"]},
                     remove={folder / name for name in stale})
