"""advisor's ``estimate`` against published GPU training runs (issue 13's benchmark).

The cases are ``benchmarks/published/*.jsonl`` (format, sources and provenance:
``benchmarks/published/README.md``); each is priced with advisor's own Python API,
:func:`advisor.app.api.estimate`, given what the source states: catalog GPU, model config, sequence
length, micro-batch, accumulation, precision, weights dtype, optimizer, checkpointing, parallelism,
offload, method and LoRA rank / targets (QLoRA: double quantization or not), and the stack (:func:`stack_options`: attention kernel, loss kernel,
compile, packing, fp8; the framework, LitGPT's own code for its runs; bitsandbytes' version for QLoRA, with
reentrant checkpointing keeping no old-bitsandbytes input). A setting the source does not state is left to
``estimate``'s own default, or to the source's framework's where it has one (QLoRA through PEFT: checkpointing on,
:func:`_peft_kbit_recipe`), and named in the case's "why it may differ" column; nothing is invented. A case
advisor cannot express (no catalog GPU, LoRA on the MLP only or on q, k, v alone, a checkpointing policy advisor
has no counterpart for, a plan the rules refuse) is listed as skipped with its reason.

Models: a Hub id in the shipped catalog (``probes/configs``) is used by id; every other model has its
published config.json in ``benchmarks/published/configs/<id with / as -->/`` (values and how they were
checked: ``benchmarks/published/configs/README.md``). Instruct variants use their base model's config
(same architecture): :data:`MODEL_ALIASES`.

What is compared, like with like (``advisor/engine/memory.py``):
- memory: ``max_memory_allocated`` with ``memory.peak_bytes`` (live tensors); ``max_memory_reserved``
  with the allocator's reserve, ``memory.device_bytes`` less the CUDA context; NVML "used" with
  ``memory.device_bytes``. Error = predicted / measured - 1;
- fit: the published verdict (it ran: a memory reading, a rate or "fits"; or out of memory) against
  ``memory.fits`` (device memory within advisor's planning margin, 90 % of the GPU); "fit at capacity" the same
  against the whole GPU, which is the question "did it run out of memory";
- ratio: between two configurations of one source (its stack), predicted speed-up over published
  speed-up, each case against the first case with a rate of its source and code revision (``stack.revision``,
  where a source's figures were measured with two versions of its code; GPU counts cancel);
- throughput: ``speed.tokens_per_s`` / GPUs against published tokens/s per GPU.

The leave-one-source-out figures (every constant fitted to these runs refitted without the source scored:
``benchmarks/loso.py``) follow the summary.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/published.py [--json] [--cases GLOB] [--no-write] [--no-loso]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.app.api import estimate, probe_hardware  # noqa: E402
from advisor.engine.bands import plan_class  # noqa: E402
from probes.cuda_stack import CUDA_VERSION_PATTERN  # noqa: E402
from advisor.core.errors import AdvisorError  # noqa: E402
from probes.model import ModelProfile, profile_model  # noqa: E402
from advisor.core.kernels import BNB_DROPS_INPUTS, Checkpointing, Framework, LossKernel, legacy_bitsandbytes  # noqa: E402
from advisor.core.vocabulary import LoraTargets, Method, Parallelism, values  # noqa: E402

CASES_DIR = ROOT / "benchmarks" / "published"
CONFIGS_DIR = CASES_DIR / "configs"
RESULTS = ROOT / "benchmarks" / "results" / "published.md"

#: The sources' GPU names → catalog ids (``advisor probe --gpu list``), with what the mapping assumes.
GPUS: dict[str, tuple[str, str | None]] = {
    "A10G": ("a10g", None),
    "L40S": ("l40s", None),
    "A100-SXM4-40GB": ("a100-40gb", None),
    "A100-SXM4-80GB": ("a100-80gb", None),
    "A100-80GB": ("a100-80gb", "A100 80GB form factor not stated: SXM4 entry (same memory)"),
    "H100 (DGX-H100)": ("h100-sxm", None),
    "V100-16GB": ("v100-16gb", "V100 form factor not stated: SXM2 entry"),
    "V100-32GB": ("v100-32gb", "V100 form factor not stated: SXM2 entry"),
    "V100-SXM3-32GB": ("v100-32gb", "V100 SXM3 (DGX-2) as the catalog's SXM2 32GB: same memory"),
    "H100-96GB-HBM2e-500W": (
        "h100-sxm",
        "H100 96GB HBM2e at 500 W (Grand Teton) as the catalog's H100 SXM5 with "
        "the source's 96 GB and 2.4 TB/s; its bf16 peak, 'between SXM and NVL' by the source, "
        "taken as the SXM's (an upper bound)",
    ),
    "H200": ("h200", "H200 form factor not stated (8 per host with NVLink): SXM entry"),
    "RTX 3090": ("rtx-3090", None),
    "A100-40GB": ("a100-40gb", "A100 40GB form factor not stated: SXM4 entry (same memory)"),
    "A100 40GB SMX": ("a100-40gb", "the source's 'A100 40GB SMX' read as the SXM4 40GB"),
    "H100 80GB SXM": ("h100-sxm", None),
}

#: Source GPUs the catalog has no entry for, priced as the :data:`GPUS` entry with the figures the source states
#: (``GPUInfo`` fields). torchtitan's Grand Teton H100 (``benchmarks/llama3_h100_202412_torchtitan.md``, "Hardware":
#: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", 500 W): 96 GiB nominal with the share the 80 GB part shows
#: (81,559 of 81,920 MiB), 97,871 MiB; its peak FLOP/s stays the SXM's, which the source says it lies below.
GPU_AS_STATED = {"H100-96GB-HBM2e-500W": {"memory_total_bytes": 97_871 * 2**20, "memory_bandwidth_gbps": 2400.0}}

#: Hub ids whose architecture is another id's (the instruct / renamed variants of a base model).
MODEL_ALIASES = {
    "meta-llama/Meta-Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Llama-3.1-70B",
    "meta-llama/Meta-Llama-3-70B": "meta-llama/Llama-3.1-70B",  # same shapes; 3.1 adds rope scaling, 128k positions
    "NousResearch/Llama-2-70b-hf": "meta-llama/Llama-2-70b-hf",  # a re-upload of Meta's weights and config
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
}

#: Cases without a Hub id → their config folder under CONFIGS_DIR (shapes from the source's configs).
UNNAMED_MODELS = {
    "flashattn-training-gpt3-125m": "flash-attention--gpt3s-flash",
    "flashattn-training-gpt3-355m": "flash-attention--gpt3m-flash",
    "flashattn-training-gpt3-760m": "flash-attention--gpt3l-flash",
    "flashattn-training-gpt3-1p3b": "flash-attention--gpt3xl-flash",
    "flashattn-training-gpt3-2p7b": "flash-attention--gpt3-2.7B-flash-hdim128",
    "deepspeed-zero-tutorial-gpt2-1p5b-ddp-8xv100-oom": "deepspeed-megatron--gpt2-1.5b",
    "deepspeed-zero-tutorial-gpt2-1p5b-zero1-8xv100-fits": "deepspeed-megatron--gpt2-1.5b",
    "deepspeed-zero-tutorial-gpt2-10b-zero2-32xv100-fits": "deepspeed-megatron--gpt2-10b",
}

CASE_FIELDS = ("id", "source", "hardware", "model", "workload", "plan", "stack", "measured")
SOURCE_FIELDS = ("kind", "title", "url", "where", "commit", "quote")
MEMORY_QUANTITIES = ("max_memory_allocated", "max_memory_reserved", "nvml_used")
NETWORKS = ("nvlink", "pcie", "infiniband", "ethernet")
GB = 1e9


class Skip(Exception):
    """A case advisor cannot price as the source ran it; the message says why."""


@dataclass
class Result:
    """One case: what was published, what advisor predicts, and why they may differ."""

    id: str
    source: str
    model: str
    gpu: str
    plan: str = ""
    method: str = ""
    skipped: str | None = None
    memory_quantity: str | None = None
    measured_bytes: int | None = None
    predicted_bytes: int | None = None
    memory_error: float | None = None
    fits_published: bool | None = None
    fit_basis: str | None = None
    fits_predicted: bool | None = None
    device_bytes: int | None = None
    usable_bytes: int | None = None
    capacity_bytes: int | None = None
    verdict: str | None = None  #: advisor's three-state verdict (``MemoryEstimate.verdict``)
    plan_class: str | None = None  #: :func:`advisor.engine.bands.plan_class`: the class its residuals band
    fits_capacity: bool | None = None  #: device bytes within the whole GPU (no planning margin)
    rate_unit: str | None = None
    rate_published: float | None = None
    rate_predicted: float | None = None
    per_gpu: bool = False
    revision: str | None = None  #: ``stack.revision``: the code the figures were measured with, where a source mixes
    why: list[str] = field(default_factory=list)


def load_cases(pattern: str = "*") -> list[dict]:
    """Every case of ``benchmarks/published/*.jsonl`` whose id matches ``pattern``, file by file."""
    cases = []
    for file in sorted(CASES_DIR.glob("*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                case = json.loads(line)
                case["_file"] = file.stem
                if fnmatch.fnmatch(case["id"], pattern):
                    cases.append(case)
    return cases


def missing_provenance(case: dict) -> list[str]:
    """The provenance fields a case lacks (empty when it names its source, commit and quote)."""
    missing = [f for f in CASE_FIELDS if not isinstance(case.get(f), (dict, str)) or not case.get(f)]
    source = case.get("source") or {}
    missing += [f"source.{f}" for f in SOURCE_FIELDS if not source.get(f)]
    return missing


#: Further ``<id with / as -->.json`` configs for ids this checkout's catalog lacks (``--extra-configs``).
EXTRA_CONFIGS: list[Path] = []


def model_ref(case: dict) -> str:
    """What ``estimate`` gets as the model: a config folder of ours (:data:`UNNAMED_MODELS`, or the case's
    ``model.config``), else the (aliased) Hub id (or its file in :data:`EXTRA_CONFIGS` when the shipped catalog lacks
    it).

    Raises:
        Skip: the case names no model we have a config for.
    """
    if case["id"] in UNNAMED_MODELS:
        return str(CONFIGS_DIR / UNNAMED_MODELS[case["id"]])
    if case["model"].get("config"):  # a model without a Hub id whose case names its config folder
        return str(CONFIGS_DIR / case["model"]["config"])
    hub_id = case["model"]["id"]
    if not hub_id:
        raise Skip("no model id and no config for it")
    hub_id = MODEL_ALIASES.get(hub_id, hub_id)
    ours = CONFIGS_DIR / hub_id.replace("/", "--")
    if ours.is_dir():
        return str(ours)
    name = hub_id.replace("/", "--") + ".json"
    if not (ROOT / "probes" / "configs" / name).is_file():
        extra = next((d / name for d in EXTRA_CONFIGS if (d / name).is_file()), None)
        if extra is not None:
            return str(extra)
    return hub_id


@lru_cache(maxsize=None)
def _profile(ref: str, task: str | None) -> ModelProfile:
    return profile_model(ref, task)


def hardware_options(case: dict, notes: list[str]) -> dict:
    """``gpu``, ``nodes`` and ``interconnect`` of a case (COUNT per node, as ``--gpu NAME:COUNT``), and its stack's
    CUDA version where the source states one (``--cuda-version``: the CUDA context by module loading).

    Raises:
        Skip: a GPU the catalog does not have, or one the source does not name.
    """
    hw = case["hardware"]
    if hw["gpu"] not in GPUS:
        raise Skip(f"GPU '{hw['gpu']}' has no catalog entry (the source names no model, or the catalog lacks it)")
    gpu, assumption = GPUS[hw["gpu"]]
    if assumption:
        notes.append(assumption)
    count, nodes = hw.get("count"), hw.get("nodes") or 1
    if count is None:
        count = 1
        notes.append("GPU count not stated: planned on 1 GPU")
    elif hw.get("nodes") is None and count > 1:
        notes.append(f"nodes not stated: {count} GPUs planned as one node")
    opts = {"gpu": f"{gpu}:{count // nodes}", "nodes": nodes}
    link = (hw.get("interconnect") or "").lower()
    if link in NETWORKS and (nodes > 1 or link in ("nvlink", "pcie")):
        opts["interconnect"] = link
    if nodes > 1:
        opts.update(_network(hw, count // nodes))
    cuda = str(case["stack"].get("cuda") or "")
    if re.match(CUDA_VERSION_PATTERN, cuda):
        opts["cuda_version"] = cuda
    return opts


_PER_GPU_LINK = re.compile(r"(\d+)\s*Gb/s(?:\s*\([^)]*\))?\s*per GPU", re.IGNORECASE)


def _network(hw: dict, per_node: int) -> dict:
    """``inter_node_gbps`` / ``nics_per_node`` for a multi-node case: the NIC speed its source states ("RDMA 400 Gb/s
    per GPU between hosts": one NIC a GPU), else nothing: the catalog's typical server for the GPU (a named DGX H100:
    its 400 Gb/s adapters, ``probes/data/gpus.json`` ``nic_gbit_s``), or the network's figure."""
    if stated := _PER_GPU_LINK.search(hw.get("interconnect") or ""):
        return {"interconnect": "infiniband", "inter_node_gbps": float(stated.group(1)), "nics_per_node": per_node}
    return {}


def _optimizer(name: str | None) -> str | None:
    if name is None:
        return None
    text = name.lower()
    if text.startswith("paged-adamw"):
        return "paged-adamw-8bit" if "8bit" in text else "paged-adamw"
    if "8bit" in text or "8-bit" in text:
        return "adamw-8bit"
    if "adam" in text:
        return "adamw"
    if text.startswith("sgd"):
        return "sgd"
    raise Skip(f"optimizer '{name}' has no advisor counterpart")


def _parallelism(name: str | None) -> dict:
    """``parallelism``, ``tensor_parallel``, ``pipeline_parallel``, ``virtual_pipeline``, ``context_parallel`` and
    ``expert_parallel`` for the sources' names (``BASE+tpN+ppN+vpN+cpN+epN``, vp: the interleaved schedule's chunks a
    stage, cp: each sequence split over N GPUs, ep: the routed experts split over N GPUs; a name of ``tpN+ppN`` alone
    leaves the data-parallel strategy to advisor); ``fsdp2`` is a full shard on FSDP2 (advisor's default
    ``fsdp_version``), the other FSDP names are FSDP1's strategies (their sources' code: Answer.AI's fsdp_qlora,
    accelerate's default through the Trainer, Lightning Fabric's FSDPStrategy), ``fsdp_version`` 1."""
    if name is None:
        return {}
    text = name.lower()
    if text.startswith("none"):
        return {"parallelism": "none"}
    base, *extra = text.split("+")
    if base.startswith(("tp", "pp", "cp", "ep")):
        base, extra = "", [base, *extra]
    degrees = {
        "tp": "tensor_parallel",
        "pp": "pipeline_parallel",
        "vp": "virtual_pipeline",
        "cp": "context_parallel",
        "ep": "expert_parallel",
    }
    out = {degrees[e[:2]]: int(e[2:]) for e in extra if e[:2] in degrees and int(e[2:]) > 1}
    if base == "fsdp2":
        out["parallelism"] = Parallelism.FSDP_FULL_SHARD.value
    elif base:
        out["parallelism"] = base
        if Parallelism.of(base).fsdp:
            out["fsdp_version"] = 1
    return out


#: The sources' checkpointing policies advisor has no counterpart for, with why (``plan.gradient_checkpointing``).
UNPRICED_CHECKPOINTING = {
    "selective-attention": (
        "Megatron-LM's selective activation recomputation (only attention's QK^T, softmax, dropout and attention over "
        "V recomputed, Korthikanti et al. 2022 sec. 5) has no advisor counterpart (advisor's selective-op is "
        "torchtitan's op-level policy)"
    ),
    "microbatch-level": (
        "microbatch-level recomputation (all activations of the in-flight microbatches that fit kept, Korthikanti et "
        "al. 2022 appendix C) has no advisor counterpart (advisor checkpoints every microbatch alike)"
    ),
}


def _checkpointing(value: bool | str | None) -> bool | None:
    """The sources' activation checkpointing as advisor's on / off: 'full' and advisor's selective policies (op- or
    layer-wise, torchtitan: the plan's ``checkpointing``, :func:`_checkpointing_policy`) are on.

    Raises:
        Skip: a policy advisor cannot state (:data:`UNPRICED_CHECKPOINTING`, or any other name).
    """
    if isinstance(value, str):
        if value in values(Checkpointing):
            return True
        raise Skip(UNPRICED_CHECKPOINTING.get(value, f"checkpointing '{value}' has no advisor counterpart"))
    return value


def _checkpointing_policy(value: bool | str | None) -> dict:
    """``checkpointing`` for torchtitan's selective policies ('selective-op', 'selective-layer'); else nothing
    (full)."""
    return {"checkpointing": value} if value in values(Checkpointing) and Checkpointing.of(value).selective else {}


def _peft_kbit_recipe(case: dict) -> bool:
    """Whether the case is QLoRA through transformers + PEFT, whose k-bit preparation,
    ``peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=True, ...)`` (``peft/utils/other.py``),
    turns activation checkpointing on unless told not to: where such a source leaves checkpointing unstated, it is
    taken as on. The one source this applies to (unsloth's README, Hugging Face + FA2 column) bears it out: advisor
    puts its maximum contexts (Llama 3.1 8B on 40 / 48 / 80 GB, Llama 3.3 70B on 80 GB) at 2.4-3.8x their GPU
    without checkpointing and at 0.84-0.91 with it."""
    framework = case["stack"].get("framework") or ""
    return case["plan"].get("method") == Method.QLORA and "PEFT" in framework


def _model_split(plan_opts: dict) -> int:
    """The GPUs one data-parallel replica spans: tensor × pipeline × context parallel (expert parallel splits the
    experts inside the data-parallel group, Megatron-Core's layout, and spans no GPUs of its own)."""
    return (
        plan_opts.get("tensor_parallel", 1)
        * plan_opts.get("pipeline_parallel", 1)
        * plan_opts.get("context_parallel", 1)
    )


def _accumulation(case: dict, plan_opts: dict, gpus: int) -> int | None:
    """Gradient accumulation as stated, else global / (micro × data-parallel GPUs) when whole (the data-parallel
    GPUs: all of them over tensor × pipeline × context parallel)."""
    w = case["workload"]
    if w.get("gradient_accumulation_steps"):
        return w["gradient_accumulation_steps"]
    micro, total = w.get("micro_batch_size"), w.get("global_batch_size")
    replicas = max(gpus // _model_split(plan_opts), 1)
    if micro and total and total % (micro * replicas) == 0:
        return total // (micro * replicas)
    return None


def plan_options(case: dict, gpus: int, notes: list[str]) -> dict:
    """The plan settings the source states, as ``estimate`` keywords.

    Raises:
        Skip: a setting advisor has no value for.
    """
    p, w = case["plan"], case["workload"]
    opts: dict = {"method": p.get("method") or "full", **_parallelism(p.get("parallelism"))}
    stated = {
        "precision": p.get("precision"),
        "optimizer": _optimizer(p.get("optimizer")),
        "gradient_checkpointing": _checkpointing(p.get("gradient_checkpointing")),
        "seq_len": w.get("seq_len"),
        "micro_batch_size": w.get("micro_batch_size"),
        "tf32": p.get("tf32"),
        "offload": p.get("offload"),
        "lora_rank": p.get("lora_rank"),
    }
    opts.update({k: v for k, v in stated.items() if v is not None})
    if stated["gradient_checkpointing"] is None and _peft_kbit_recipe(case):
        stated["gradient_checkpointing"] = opts["gradient_checkpointing"] = True
        notes.append("checkpointing not stated: on, as PEFT's prepare_model_for_kbit_training turns it on by default")
    unstated = [k for k in ("precision", "optimizer", "gradient_checkpointing", "seq_len") if stated[k] is None]
    if "parallelism" not in opts and gpus > _model_split(opts):  # one replica: no data-parallel flavour to state
        unstated.append("parallelism")
    if unstated:
        notes.append("not stated, advisor's default: " + ", ".join(unstated))
    if p.get("weights_dtype") in ("fp32", "bf16"):
        opts["weights_dtype"] = p["weights_dtype"]
    if p.get("double_quant") is not None and opts["method"] == Method.QLORA:
        opts["double_quant"] = p["double_quant"]
    if opts["method"] != "full":
        if p.get("lora_targets") not in values(LoraTargets):
            raise Skip(f"LoRA targets outside advisor's {' / '.join(values(LoraTargets))} (see the case's notes)")
        opts["lora_targets"] = p["lora_targets"]
    if (
        opts.get("parallelism", "").startswith("zero")
        and gpus == _model_split(opts)
        and opts.get("offload", "none") == "none"
    ):  # ZeRO-Offload on one rank still moves the optimizer to the CPU
        opts["parallelism"] = "none"  # a distributed optimizer over one data-parallel rank shards nothing
        notes.append("one data-parallel rank: the distributed optimizer shards nothing (advisor: none)")
    accumulation = _accumulation(case, opts, gpus)
    if accumulation:
        opts["gradient_accumulation_steps"] = accumulation
    elif w.get("global_batch_size") and not w.get("micro_batch_size"):  # estimate's micro-batch, accumulated to it
        opts["global_batch_size"] = w["global_batch_size"]
        notes.append("micro-batch not stated: advisor's default, accumulated to the stated global batch")
    opts.update(stack_options(case))
    opts.update(_checkpointing_policy(p.get("gradient_checkpointing")))
    return opts


#: The sources' attention names → advisor's values (``advisor.core.kernels.Attention``).
ATTENTION = {
    "flash-attention": "flash-attention-2",
    "flash-attention-2": "flash-attention-2",
    "flash_attention_2": "flash-attention-2",
    "fa2": "flash-attention-2",
    "flash-attention-3": "flash-attention-3",
    "flash_attention_3": "flash-attention-3",
    "sdpa": "sdpa",
    "eager": "eager",
}


#: The sources' frameworks whose layers are Megatron-style (``--framework megatron``): Megatron-Core with Transformer
#: Engine (NeMo 1 / 2), Megatron-LM's GPT-2 (DeepSpeed's examples), flash-attention's training GPT (fused dense +
#: GeLU, fused dropout-add-LayerNorm). NeMo AutoModel runs the Hugging Face models (transformers).
MEGATRON_STACKS = ("Megatron-Core", "Megatron-LM", "flash-attention training scripts")


#: The loss kernels a case's ``stack.fused_loss`` may name (advisor's values; ``none``: the standard loss)
FUSED_LOSSES = tuple(v for v in values(LossKernel) if v != LossKernel.STANDARD)


def stack_options(case: dict) -> dict:
    """The stack the source states, as ``estimate`` keywords (unstated: ``estimate``'s defaults, the Trainer's
    stack: SDPA, the standard loss, no compile, no packing, no fp8, no async tensor parallel)."""
    s = case["stack"]
    opts: dict = {}
    attention = ATTENTION.get((s.get("attention") or "").lower())
    if attention:
        opts["attention"] = attention
    if s.get("fused_loss") in FUSED_LOSSES:
        opts["loss_kernel"] = s["fused_loss"]
    for key, option in (("compile", "torch_compile"), ("fp8", "fp8"), ("async_tp", "async_tp")):
        if s.get(key) is not None:
            opts[option] = bool(s[key])
    if s.get("packing") and attention in ("flash-attention-2", "flash-attention-3"):
        opts["packing"] = True
    framework = s.get("framework") or ""
    if any(name in framework.lower() for name in ("litgpt", "lit-gpt")) or (
        "lit_gpt_model" in case.get("notes", "") and "TinyLlama" not in framework
    ):
        # LitGPT's own model code (lightning-thunder trains lit-gpt's model, but for one run)
        opts["framework"] = Framework.LITGPT.value
    elif any(name in framework for name in MEGATRON_STACKS):
        opts["framework"] = Framework.MEGATRON.value
    if case["plan"].get("method") == "qlora":
        # reentrant checkpointing runs the forward without autograd: no MatMul4Bit context keeps an input
        reentrant = case["plan"].get("gradient_checkpointing") and s.get("reentrant_checkpointing")
        opts["legacy_bitsandbytes"] = legacy_bnb(s.get("bitsandbytes")) and not reentrant
    return opts


def legacy_bnb(version: str | None) -> bool:
    """Whether a case's bitsandbytes (the version stated or pinned, or '<X.Y.Z': older than that, from the run's date)
    keeps its 4-bit layers' inputs (older than 0.43.2); unstated: the current behaviour."""
    if version and version.startswith("<"):
        bound = version[1:]
        return legacy_bitsandbytes(bound) or bound == ".".join(map(str, BNB_DROPS_INPUTS))
    return legacy_bitsandbytes(version)


def published_fit(case: dict) -> tuple[bool | None, str | None]:
    """Did it fit, by the source, and on what evidence?"""
    m = case["measured"]
    if m.get("oom"):
        return False, "out of memory"
    if m.get("memory_bytes"):
        return True, "ran (memory measured)"
    if m.get("tokens_per_s_per_gpu") or m.get("samples_per_s"):
        return True, "ran (rate published)"
    if m.get("oom") is False:
        return True, "fits (stated)"
    return None, None


def predicted_memory(quantity: str, est) -> int:
    """advisor's figure for a measured quantity (see the module docstring)."""
    mem = est.memory
    if quantity == "max_memory_allocated":
        return mem.peak_bytes
    if quantity == "max_memory_reserved":
        return mem.device_bytes - mem.components.cuda_context_bytes
    return mem.device_bytes


def stack_notes(case: dict) -> list[str]:
    """What the source's stack does that advisor does not model (its stack settings cover the attention kernel,
    chunked / Liger losses, packing, compile and fp8; not Transformer Engine's or other fused kernels, nor model
    code other than transformers')."""
    s, p = case["stack"], case["plan"]
    text = " ".join([case.get("notes") or "", case["source"].get("quote") or "", s.get("framework") or ""])
    out = []
    attention = (s.get("attention") or "").lower()
    if not attention:
        out.append("attention kernel not stated (advisor: SDPA)")
    elif attention not in ATTENTION:
        out.append(f"attention '{s['attention']}' (advisor: SDPA)")
    stated = " ".join([case.get("notes") or "", s.get("framework") or ""])  # the quote's label can predate the code
    if ("TE +" in stated or "TE =" in stated) and "No Transformer Engine layers" not in stated:
        out.append("Transformer Engine kernels")
    if "Triton LoRA" in (s.get("framework") or ""):
        out.append("the framework's own Triton LoRA kernels (advisor: PEFT's LoRA)")
    if s.get("fused_loss") not in (None, "none", *FUSED_LOSSES):
        out.append(f"loss kernel '{s['fused_loss']}' (advisor: the standard loss)")
    if s.get("packing") and ATTENTION.get(attention) not in ("flash-attention-2", "flash-attention-3"):
        out.append("packed sequences (advisor: padding-free packing needs FlashAttention)")
    if "'hybridep'" in stated or "'deepep'" in stated:
        out.append(
            "its token dispatcher sends a token once per remote node (HybridEP / DeepEP; advisor prices a plain "
            "all-to-all, up to k times the bytes between nodes)"
        )
    if s.get("sequence_parallel") is False and _parallelism(p.get("parallelism")).get("tensor_parallel", 1) > 1:
        out.append(
            "tensor parallel without sequence parallelism (advisor's tensor parallel splits the norms' and "
            "dropouts' activations and traffic too, as sequence parallelism does)"
        )
    if "no momentum" in (p.get("optimizer") or ""):
        out.append("SGD without momentum keeps no optimizer state (advisor's sgd: a momentum buffer)")
    if "padded per batch" in text or "padded to the longest" in text:
        out.append("padded to each batch's longest sample: steps can be shorter than seq_len")
    if "INCLUDING the periodic evaluation" in text:
        out.append("whole-run peak includes evaluation / generation")
    if stack_options(case).get("framework") == Framework.LITGPT:
        out.append("LitGPT's own model code (advisor: --framework litgpt, its untied LM head included)")
    elif stack_options(case).get("framework") == Framework.MEGATRON:
        out.append("Megatron-style fused layers (advisor: --framework megatron)")
    elif "lit" in (s.get("framework") or "").lower():
        out.append("LitGPT's own model code, no dropout")
    return out


def estimate_case(case: dict, notes: list[str]):
    """(advisor's ``Estimate`` of a case as mapped, the model's profile); appends to ``notes`` what the mapping
    assumed. Raises :class:`Skip` when advisor cannot price the case."""
    hw = hardware_options(case, notes)
    gpus = int(hw["gpu"].split(":")[1]) * hw["nodes"]
    opts = plan_options(case, gpus, notes)
    ref = model_ref(case)
    try:
        profile = _profile(ref, case["model"].get("task"))
        machine = probe_hardware(**hw)
        if stated := GPU_AS_STATED.get(case["hardware"]["gpu"]):
            machine = machine.model_copy(update={"gpus": [g.model_copy(update=stated) for g in machine.gpus]})
        est = estimate(profile, hardware=machine, **opts)
        if opts.get("torch_compile") and case["stack"].get("compiled_loss") is False:
            # the model compiled, its loss not: advisor's compile fuses the loss (advisor.core.kernels.loss_kept)
            # async tensor parallel needs compile and moves no memory: the memory pass runs without it
            eager_loss = estimate(profile, hardware=machine, **{**opts, "torch_compile": False, "async_tp": False})
            est = est.model_copy(update={"memory": eager_loss.memory})
            notes.append("model compiled, loss computed outside it: memory priced without compile, speed with it")
        return est, profile
    except AdvisorError as err:
        raise Skip(f"{type(err).__name__}: {str(err).splitlines()[0]}") from None


def run_case(case: dict) -> Result:
    """Price one case and compare it; a case that cannot be priced comes back with ``skipped`` set."""
    r = Result(
        id=case["id"],
        source=case["_file"],
        model=case["model"]["id"] or UNNAMED_MODELS.get(case["id"]) or case["model"].get("config") or "?",
        gpu=f"{case['hardware'].get('count') or '?'}× {case['hardware']['gpu']}",
        revision=case["stack"].get("revision"),
    )
    notes: list[str] = []
    try:
        est, profile = estimate_case(case, notes)
    except Skip as skip:
        r.skipped = str(skip)
        return r
    m = case["measured"]
    r.plan = est.plan.describe() + f", seq {est.workload.seq_len}"
    r.method = est.plan.method
    r.fits_published, r.fit_basis = published_fit(case)
    r.fits_predicted, r.device_bytes, r.usable_bytes = est.memory.fits, est.memory.device_bytes, est.memory.usable_bytes
    r.fits_capacity, r.capacity_bytes = est.memory.fits_capacity, est.memory.capacity_bytes
    r.verdict = est.memory.verdict.value
    r.plan_class = plan_class(est.plan, _generation(hardware_options(case, [])["gpu"]))
    if m.get("memory_bytes") and m.get("memory_quantity") in MEMORY_QUANTITIES:
        r.memory_quantity, r.measured_bytes = m["memory_quantity"], int(m["memory_bytes"])
        r.predicted_bytes = predicted_memory(r.memory_quantity, est)
        r.memory_error = r.predicted_bytes / r.measured_bytes - 1
    if m.get("tokens_per_s_per_gpu"):
        r.rate_unit, r.rate_published, r.per_gpu = "tokens/s/GPU", m["tokens_per_s_per_gpu"], True
        r.rate_predicted = est.speed.tokens_per_s / est.plan.num_gpus
    elif m.get("samples_per_s"):
        r.rate_unit, r.rate_published = "samples/s", m["samples_per_s"]
        r.rate_predicted = est.speed.samples_per_s
        r.per_gpu = case["hardware"].get("count") is not None
    r.why = stack_notes(case) + notes + _states_check(r, est)
    return r


@lru_cache(maxsize=None)
def _generation(gpu: str) -> int | None:
    """The compute-capability major of a catalog GPU (``NAME:COUNT``)."""
    gpus = probe_hardware(gpu=gpu).gpus
    return gpus[0].cc[0] if gpus else None


def _states_check(r: Result, est) -> list[str]:
    """A reading below what the stated plan's weights, gradients and optimizer states alone take (advisor's
    count, exact for them): the source's setup is likely not the one that produced the reading."""
    c = est.memory.components
    states = c.weights_bytes + c.gradients_bytes + c.optimizer_states_bytes
    if r.measured_bytes is not None and r.measured_bytes < states:
        return [
            f"measured is below the stated plan's weights + gradients + optimizer states ({states / GB:.2f} GB): "
            "setup likely misreported"
        ]
    return []


def ratios(results: list[Result]) -> list[tuple[str, str, float]]:
    """(case, baseline, predicted speed-up / published speed-up) for every case with a rate against the
    first case with a rate of the same source and code revision (two configurations of one stack: a source whose
    rows were measured with two versions of its code, NeMo AutoModel's table, pairs each version's rows apart)."""
    base: dict[tuple[str, str | None], Result] = {}
    out = []
    for r in results:
        if r.skipped or r.rate_published is None:
            continue
        b = base.setdefault((r.source, r.revision), r)
        if b is not r and b.rate_unit == r.rate_unit:
            out.append((r.id, b.id, (r.rate_predicted / b.rate_predicted) / (r.rate_published / b.rate_published)))
    return out


def within(x: float, factor: float = 1.25) -> bool:
    """Whether a ratio is within ``factor`` either way."""
    return 1 / factor <= x <= factor


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def summary(results: list[Result]) -> dict[str, str]:
    """The summary lines of issue 13 (memory, fit, ratio, throughput), and the memory ratio's spread."""
    run = [r for r in results if not r.skipped]
    errors = [r.memory_error for r in run if r.memory_error is not None]
    fits = [r for r in run if r.fits_published is not None]
    pairs = [x for *_, x in ratios(results)]
    rates = [
        r.rate_predicted / r.rate_published
        for r in run
        if r.rate_published and r.per_gpu and r.rate_unit == "tokens/s/GPU"
    ]
    memory_ratios = [1 + e for e in errors]
    lines = {
        "memory": (
            f"memory: n={len(errors)} median |error| {statistics.median(map(abs, errors)):.1%} "
            f"worst {max(map(abs, errors)):.1%}"
        )
        if errors
        else "memory: n=0",
        "fit": f"fit: n={len(fits)} agree {sum(r.fits_published == r.fits_predicted for r in fits)}",
        # the same verdicts against the whole GPU: did it run out of memory, not would advisor plan it (its 10 %
        # planning margin makes a run at 90-100 % of the memory a "no fit")
        "fit at capacity": (
            f"fit at capacity: n={len(fits)} agree {sum(r.fits_published == r.fits_capacity for r in fits)}"
        ),
        "ratio": (
            f"ratio: n={len(pairs)} median {statistics.median(pairs):.2f}× within-1.25x {sum(map(within, pairs))}"
        )
        if pairs
        else "ratio: n=0",
        "throughput": (
            f"throughput: n={len(rates)} median predicted/published {statistics.median(rates):.2f} "
            f"within-1.25x {sum(map(within, rates))}"
        )
        if rates
        else "throughput: n=0",
        "memory ratio": (
            f"memory ratio: n={len(memory_ratios)} median {statistics.median(memory_ratios):.2f} "
            f"p10 {_quantile(memory_ratios, 0.1):.2f} p90 {_quantile(memory_ratios, 0.9):.2f}"
        )
        if memory_ratios
        else "memory ratio: n=0",
    }
    for method in values(Method):  # issue 12: the fine-tuning methods' memory on their own
        own = [r.memory_error for r in run if r.memory_error is not None and r.method == method]
        if own:
            lines[f"memory {method}"] = (
                f"memory {method}: n={len(own)} median |error| "
                f"{statistics.median(map(abs, own)):.1%} worst {max(map(abs, own)):.1%}"
            )
    for stack, sources in (("LitGPT", LITGPT_SOURCES), ("other stacks", None)):  # the framework advisor does not model
        own = [
            r.memory_error
            for r in run
            if r.memory_error is not None and (r.source in sources if sources else r.source not in LITGPT_SOURCES)
        ]
        if own:
            lines[f"memory {stack}"] = (
                f"memory {stack}: n={len(own)} median |error| "
                f"{statistics.median(map(abs, own)):.1%} worst {max(map(abs, own)):.1%}"
            )
    return lines


#: The sources whose runs use LitGPT's own model code and loops (Lightning Fabric), not transformers + PEFT: advisor's
#: columns are fitted to the latter (benchmarks/litgpt_simulated.py simulates LitGPT's own step)
LITGPT_SOURCES = {"litgpt", "lightning-thunder"}


def _gb(x: int | None) -> str:
    return "" if x is None else f"{x / GB:.2f}"


def _row(r: Result) -> str:
    measured = f"{_gb(r.measured_bytes)} ({r.memory_quantity})" if r.measured_bytes else ""
    fit = (
        ""
        if r.fits_published is None
        else (
            f"{'fits' if r.fits_published else 'OOM'} / {'fits' if r.fits_predicted else 'no fit'}"
            f"{'' if r.fits_published == r.fits_predicted else ' ✗'}"
        )
    )
    rate = "" if r.rate_published is None else f"{r.rate_published:,.1f} / {r.rate_predicted:,.1f} {r.rate_unit}"
    error = "" if r.memory_error is None else f"{r.memory_error:+.1%}"
    cells = [
        r.id,
        r.source,
        r.model,
        r.gpu,
        r.plan,
        measured,
        _gb(r.predicted_bytes),
        error,
        fit,
        f"{_gb(r.device_bytes)} / {_gb(r.usable_bytes)}",
        rate,
        "; ".join(r.why),
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def markdown(results: list[Result], header: str, loso: list[str] = ()) -> str:
    """The report: summary lines, the LOSO section (``loso``: :func:`benchmarks.loso.markdown`), the per-case table,
    the skipped cases and the speed ratios."""
    lines = summary(results)
    skipped = [r for r in results if r.skipped]
    out = [
        header,
        "",
        "```",
        *lines.values(),
        "```",
        "",
        *loso,
        *([""] if loso else []),
        f"{len(results)} cases: {len(results) - len(skipped)} run, {len(skipped)} skipped. Memory in GB (10^9 B); "
        "error = predicted / measured - 1; fit = published / predicted (✗: disagree); device = advisor's "
        "memory.device_bytes / usable bytes; rate = published / predicted.",
        "",
        "| case | source | model | GPU | plan (advisor) | measured GB | predicted GB | error | fit "
        "| device / usable GB | rate | why it may differ |",
        "|" + "---|" * 12,
    ]
    out += [_row(r) for r in results if not r.skipped]
    out += [
        "",
        "## Speed ratios (two configurations of one source)",
        "",
        "| case | against | predicted speed-up / published speed-up |",
        "|---|---|---:|",
    ]
    out += [f"| {a} | {b} | {x:.2f}× |" for a, b, x in ratios(results)]
    out += ["", "## Skipped", "", "| case | reason |", "|---|---|"]
    out += [f"| {r.id} | {r.skipped} |" for r in skipped]
    return "\n".join(out) + "\n"


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results and summary as JSON")
    parser.add_argument("--cases", default="*", help="only the case ids matching this glob")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.relative_to(ROOT)}")
    parser.add_argument(
        "--no-loso",
        action="store_true",
        help="skip the leave-one-source-out section (benchmarks/loso.py: about 25 more passes over the rated runs)",
    )
    parser.add_argument(
        "--extra-configs",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="configs (<id with / as -->.json) for Hub ids the shipped catalog lacks",
    )
    args = parser.parse_args(argv)
    EXTRA_CONFIGS[:] = args.extra_configs
    cases = load_cases(args.cases)
    results = [run_case(c) for c in cases]
    section: list[str] = []
    if not args.no_loso:
        from benchmarks import loso  # imports this module

        section = loso.markdown(
            loso.cross_validate(results, cases, loso.speed_fit.device_trials()), loso.allocator_check(cases)
        )
    command = " ".join(["benchmarks/published.py", *(sys.argv[1:] if argv is None else argv)])
    header = (
        f"# Published GPU training runs vs `advisor estimate` ({date.today()}, advisor {_commit()})\n\n"
        f"`HF_HUB_OFFLINE=1 python {command}`"
        ": every case of `benchmarks/published/*.jsonl` through `advisor.app.api.estimate` (how each is "
        "mapped: the script's docstring)."
    )
    text = markdown(results, header, section)
    if not args.no_write:
        RESULTS.write_text(text, encoding="utf-8")
    if args.json:
        print(
            json.dumps(
                {"summary": summary(results), "ratios": ratios(results), "cases": [asdict(r) for r in results]},
                indent=1,
            )
        )
    else:
        print(text)


if __name__ == "__main__":
    main()
