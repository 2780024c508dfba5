"""The Python API: the same functions and models the CLI prints.

    from advisor import recommend, estimate, probe_hardware, profile_model
    rec = recommend("gpt2", gpu="a100-80gb")
    rec.settings["precision"].value  # 'bf16'

Every function raises an :class:`probes.errors.AdvisorError` subclass on bad input.
"""

from __future__ import annotations

import importlib.util

from pydantic import BaseModel, ConfigDict, Field

from advisor.engine import planner
from advisor.engine.memory import MemoryEstimate
from probes.units import GIB
from advisor.engine.recommendation import SCHEMA_VERSION, Recommendation, build
from advisor.engine.speed import SpeedEstimate
from probes.errors import NoFitError, UsageError
from probes.gpu_catalog import catalog, profile_from_catalog
from probes.hardware import GPULink, HardwareProfile
from probes.model import ModelProfile, profile_model as _profile_model
from probes.nvml_probe import probe_local
from probes.vocabulary import Device, Network, Parallelism, Precision
from rules import Facts, Plan, Workload

DEFAULT_SEQ_LEN = 1024  #: capped by the model's max positions
DEFAULT_GLOBAL_BATCH_SIZE = 64  #: the documents' running example ("train with a batch size of 64")
OPTIONAL_PACKAGES = ("bitsandbytes", "deepspeed")


def probe_hardware(gpu: str | None = None, nodes: int = 1, interconnect: list[str] | str | None = None,
                   inter_node_gbps: float | None = None) -> HardwareProfile:
    """This machine's hardware, or catalog hardware for ``gpu='NAME[:COUNT]'`` over ``nodes`` nodes.

    ``interconnect``: 'nvlink' or 'pcie' inside a node (overrides the catalog's links), 'infiniband' or
    'ethernet' between nodes (bandwidth from :data:`probes.vocabulary.NETWORK_GBIT_S` unless
    ``inter_node_gbps``, in Gb/s, is given).

    Raises:
        UnknownGPUError: unknown catalog name. UsageError: nodes < 1, an unknown or contradictory interconnect.
    """
    if nodes < 1:
        raise UsageError(f"--nodes must be >= 1, got {nodes}")
    if gpu:
        profile = profile_from_catalog(gpu, nodes)
    else:
        profile = probe_local()
        if nodes > 1:
            profile = profile.model_copy(update={"nodes": nodes})
    names = [interconnect] if isinstance(interconnect, str) else list(interconnect or [])
    names = [n.strip().lower() for name in names for n in name.split(",") if n.strip()]
    unknown = [n for n in names if n not in ("nvlink", "pcie", "infiniband", "ethernet")]
    if unknown:
        raise UsageError(f"--interconnect {unknown[0]}: choose nvlink or pcie (inside a node), infiniband or "
                         "ethernet (between nodes)")
    inside = [n for n in names if n in ("nvlink", "pcie")]
    between = [n for n in names if n in ("infiniband", "ethernet")]
    if len(set(inside)) > 1 or len(set(between)) > 1:
        raise UsageError(f"--interconnect {','.join(names)}: one link inside a node and one network between nodes")
    update: dict = {}
    if inside:
        if inside[0] == "nvlink" and profile.gpu is not None and not profile.gpu.nvlink_bandwidth_gbps:
            raise UsageError(f"--interconnect nvlink: {profile.gpu.name} has no NVLink")
        links = [GPULink(a=link.a, b=link.b, nvlink_count=(link.nvlink_count or 12) if inside[0] == "nvlink" else 0,
                         pcie_relation=None if inside[0] == "nvlink" else "PHB") for link in profile.links]
        update["links"] = links
    if between:
        update["interconnect"] = between[0]
        update["inter_node_gbit_s"] = Network(between[0]).gbit_s
    if inter_node_gbps is not None:
        if inter_node_gbps <= 0:
            raise UsageError(f"--inter-node-gbps must be > 0, got {inter_node_gbps}")
        update["inter_node_gbit_s"] = inter_node_gbps
    if update:
        profile = profile.model_copy(update=update)
    return profile


def profile_model(model: str, task: str | None = None) -> ModelProfile:
    """Resolve and profile a model (see :func:`probes.model.profile_model`)."""
    return _profile_model(model, task)


def _packages(hardware: HardwareProfile) -> dict[str, bool]:
    """Optional packages found here; unknown (empty) when planning for other hardware."""
    if hardware.source == "catalog":
        return {}
    return {name: importlib.util.find_spec(name) is not None for name in OPTIONAL_PACKAGES}


def make_facts(model: str | ModelProfile, *, task: str | None = None, gpu: str | None = None, nodes: int = 1,
               seq_len: int | None = None, global_batch_size: int | None = None,
               hardware: HardwareProfile | None = None, objective: str = "speed",
               interconnect: list[str] | str | None = None, inter_node_gbps: float | None = None) -> Facts:
    """Gather and validate the facts of a question.

    Raises:
        UsageError: seq-len or batch <= 0, or seq-len beyond the model's max positions.
        ModelNotFoundError, BadConfigError, UnknownGPUError: from the probes.
    """
    if seq_len is not None and seq_len <= 0:
        raise UsageError(f"--seq-len must be > 0, got {seq_len}")
    if global_batch_size is not None and global_batch_size <= 0:
        raise UsageError(f"--global-batch-size must be > 0, got {global_batch_size}")
    profile = model if isinstance(model, ModelProfile) else profile_model(model, task)
    hw = hardware or probe_hardware(gpu, nodes, interconnect, inter_node_gbps)
    limit = profile.max_position_embeddings
    if seq_len is None:
        seq_len = min(limit, DEFAULT_SEQ_LEN) if limit else DEFAULT_SEQ_LEN
    elif limit and seq_len > limit:
        raise UsageError(f"--seq-len {seq_len} is beyond {profile.id}'s {limit} positions")
    if objective not in ("speed", "memory"):
        raise UsageError(f"--objective must be speed or memory, got {objective}")
    workload = Workload(seq_len=seq_len, global_batch_size=global_batch_size or DEFAULT_GLOBAL_BATCH_SIZE,
                        objective=objective)
    return Facts(hardware=hw, model=profile, workload=workload, packages=_packages(hw))


def _fits_somewhere(facts: Facts) -> planner.Candidate | None:
    return planner.search(facts).best


def suggestions(facts: Facts) -> list[str]:
    """What would fit when nothing does: a larger GPU, more GPUs (sharded, with offload)."""
    found: list[str] = []
    current = facts.gpu.memory_total_bytes if facts.gpu else 0
    if facts.gpu is None:
        found.append("plan for a GPU with --gpu NAME (see `advisor probe --gpu LIST`)")
    for entry in sorted(catalog().values(), key=lambda e: e.memory_gib):
        if entry.memory_gib * GIB <= current:
            continue
        hw = profile_from_catalog(entry.id, 1)
        best = _fits_somewhere(facts.model_copy(update={"hardware": hw, "packages": {}}))
        if best is not None:
            found.append(f"a larger GPU: --gpu {entry.id} ({entry.memory_gib:g} GiB) fits with "
                         f"{best.plan.precision}, {best.plan.optimizer}, micro-batch {best.plan.micro_batch_size}")
            break
    base = facts.gpu.catalog_id if facts.gpu is not None and facts.gpu.catalog_id else None
    if base:
        for count in (2, 4, 8, 16, 32, 64):
            per_node, nodes = min(count, 8), max(count // 8, 1)
            if facts.workload.global_batch_size % count:
                continue
            hw = profile_from_catalog(f"{base}:{per_node}", nodes)
            best = _fits_somewhere(facts.model_copy(update={"hardware": hw, "packages": {}}))
            if best is not None:
                where = f"--gpu {base}:{per_node}" + (f" --nodes {nodes}" if nodes > 1 else "")
                p = best.plan
                how = [p.parallelism] if p.parallelism != "none" else []
                how += [f"tensor parallel {p.tensor_parallel}"] if p.tensor_parallel > 1 else []
                how += [f"pipeline parallel {p.pipeline_parallel}"] if p.pipeline_parallel > 1 else []
                how += [f"{p.offload} offload"] if p.offload != "none" else []
                found.append(f"more GPUs: {where} fits with {', '.join(how) or 'data parallel'}")
                break
    if not found:
        found.append("a shorter --seq-len or a smaller model")
    return found


def recommend(model: str | ModelProfile, *, task: str | None = None, gpu: str | None = None, nodes: int = 1,
              seq_len: int | None = None, global_batch_size: int | None = None,
              hardware: HardwareProfile | None = None, objective: str = "speed",
              interconnect: list[str] | str | None = None, inter_node_gbps: float | None = None) -> Recommendation:
    """Recommend the fastest plan that fits (``objective='memory'``: the plan with the least device memory).

    Raises:
        NoFitError: nothing fits; ``str(err)`` says what would (also on ``err.suggestions``).
        UsageError, ModelNotFoundError, BadConfigError, UnknownGPUError: bad input.
    """
    facts = make_facts(model, task=task, gpu=gpu, nodes=nodes, seq_len=seq_len,
                       global_batch_size=global_batch_size, hardware=hardware, objective=objective,
                       interconnect=interconnect, inter_node_gbps=inter_node_gbps)
    result = planner.search(facts)
    if result.best is None:
        closest = min(result.candidates, key=lambda c: c.memory.device_bytes)
        ideas = suggestions(facts)
        where = facts.gpu.name if facts.gpu else "the CPU's RAM"
        summary = (f"no plan fits {facts.model.id} at seq-len {facts.workload.seq_len} on {where}: the smallest "
                   f"needs {closest.memory.device_bytes / GIB:.1f} GiB of {closest.memory.usable_bytes / GIB:.1f} GiB "
                   "usable")
        raise NoFitError(f"{summary}; would fit: {'; '.join(ideas)}", summary=summary, suggestions=ideas,
                         closest=closest)
    return build(result)


class SimulatedMemory(BaseModel):
    """A simulated training step (``--simulate``): exact live-tensor accounting on fake tensors."""

    peak_bytes: int = Field(description="peak bytes of live tensors in the simulated step (max_memory_allocated)")
    device_bytes: int = Field(description="peak_bytes with the allocator reserve and CUDA context, as memory.device_bytes")
    peak_phase: str = Field(description="where the peak happened: forward, backward or optimizer")
    phase_peaks_bytes: dict[str, int] = Field(description="peak live bytes per phase")
    analytic_error: float = Field(description="memory.peak_bytes / peak_bytes - 1 (the analytic model's error)")
    wall_s: float = Field(description="seconds the simulation took")


class Estimate(BaseModel):
    """What ``advisor estimate --json`` prints."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    schema_version: str = SCHEMA_VERSION
    """MAJOR.MINOR of this JSON's schema"""
    plan: Plan
    """the plan estimated"""
    memory: MemoryEstimate
    """its memory estimate per device"""
    speed: SpeedEstimate
    """its speed estimate"""
    simulated: SimulatedMemory | None = Field(None, description="present with --simulate")
    model: ModelProfile = Field(description="the model the plan trains")
    workload: Workload
    """sequence length and global batch size"""


def estimate(model: str | ModelProfile, *, task: str | None = None, gpu: str | None = None, nodes: int = 1,
             seq_len: int | None = None, micro_batch_size: int = 1, gradient_accumulation_steps: int = 1,
             precision: str | None = None, tf32: bool | None = None, optimizer: str = "adamw",
             gradient_checkpointing: bool = False, parallelism: str | None = None, offload: str = "none",
             hardware: HardwareProfile | None = None, simulate: bool = False,
             interconnect: list[str] | str | None = None, inter_node_gbps: float | None = None,
             tensor_parallel: int = 1, pipeline_parallel: int = 1) -> Estimate:
    """Memory and speed of one given plan (no search).

    Defaults: precision bf16 where the GPU has it, fp16 on other tensor-core GPUs, fp32 otherwise;
    tf32 on where supported; parallelism 'none' on one device, 'ddp' on several.

    Raises:
        UsageError: a value outside its range (batch <= 0, ZeRO on one GPU, ...).
    """
    for name, value in (("micro-batch-size", micro_batch_size),
                        ("gradient-accumulation-steps", gradient_accumulation_steps),
                        ("tensor-parallel", tensor_parallel), ("pipeline-parallel", pipeline_parallel)):
        if value <= 0:
            raise UsageError(f"--{name} must be > 0, got {value}")
    facts = make_facts(model, task=task, gpu=gpu, nodes=nodes, seq_len=seq_len, hardware=hardware,
                       global_batch_size=micro_batch_size * gradient_accumulation_steps, interconnect=interconnect,
                       inter_node_gbps=inter_node_gbps)
    g = facts.gpu
    gpus = facts.hardware.num_gpus
    if precision is None:
        precision = Precision.FP32 if g is None or not g.tensor_cores else (Precision.BF16 if g.bf16 else Precision.FP16)
    replicas = gpus // (tensor_parallel * pipeline_parallel) if gpus else 1
    if parallelism is None:
        parallelism = Parallelism.DDP if replicas > 1 else Parallelism.NONE
    plan = Plan(device=Device.CPU if g is None else Device.CUDA, precision=precision,
                tf32=bool(g is not None and g.tf32) if tf32 is None else bool(tf32 and g is not None and g.tf32),
                optimizer=optimizer, gradient_checkpointing=gradient_checkpointing,
                micro_batch_size=micro_batch_size, gradient_accumulation_steps=gradient_accumulation_steps,
                parallelism=parallelism, num_gpus=gpus, offload=offload, tensor_parallel=tensor_parallel,
                pipeline_parallel=pipeline_parallel)
    planner.require_legal(facts, plan)
    facts = facts.model_copy(update={"workload": Workload(seq_len=facts.workload.seq_len,
                                                          global_batch_size=plan.global_batch_size)})
    candidate = planner.evaluate(facts, plan)
    simulated = None
    if simulate:
        from advisor.engine.memory import device_bytes
        from advisor.measure.simulate import simulate as run_simulation

        result = run_simulation(facts.model, plan, facts.workload.seq_len)
        simulated = SimulatedMemory(
            peak_bytes=result.peak_bytes, device_bytes=device_bytes(result.peak_bytes, plan),
            peak_phase=result.peak_phase, phase_peaks_bytes=result.phase_peaks,
            analytic_error=candidate.memory.peak_bytes / result.peak_bytes - 1, wall_s=result.wall_s)
    return Estimate(plan=plan, memory=candidate.memory, speed=candidate.speed, simulated=simulated,
                    model=facts.model, workload=facts.workload)


def _local_hardware_for_trials() -> HardwareProfile:
    """This machine's hardware as the trials see it (every GPU, or the CPU).

    Raises:
        UsageError: NVML sees a GPU but the installed torch has no CUDA.
    """
    hw = probe_hardware()
    if hw.gpu is not None:
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"NVML sees {hw.gpu.name} but torch {torch.__version__} has no CUDA: install a CUDA "
                             "build of torch to validate on the GPU")
    return hw


def validate(model: str | ModelProfile, *, task: str | None = None, seq_len: int | None = None,
             global_batch_size: int | None = None, plan: Plan | None = None, micro_batch_size: int | None = None,
             gradient_accumulation_steps: int | None = None, precision: str | None = None, tf32: bool | None = None,
             optimizer: str | None = None, gradient_checkpointing: bool | None = None, steps: int = 10,
             warmup: int = 2, compare: bool = False, memory_limit_bytes: int | None = None, max_trials: int = 6,
             progress=None, stop=None, hardware: HardwareProfile | None = None, nproc: int | None = None,
             parallelism: str | None = None):
    """Validate a plan with short trial steps on this machine's device (see :mod:`advisor.measure.validation`).

    The plan: ``plan`` when given (e.g. from a recommendation's JSON); else this machine's
    recommendation with the given settings overriding it (a micro-batch alone keeps the global
    batch by changing the accumulation). Several GPUs here: the plan's DDP / ZeRO-2 / ZeRO-3 runs
    through torchrun (ZeRO as FSDP; ZeRO-1 is tried as ZeRO-2). On the CPU, ``nproc`` > 1 runs
    ``parallelism`` ('ddp' by default) over that many processes with the gloo backend, the global
    batch split between them. Imports torch.

    Returns:
        ValidationReport (``verdict``, ``trials``, ``confirmed_plan``; ``comparison`` with ``compare``).
    Raises:
        UsageError: inconsistent settings, a plan for another device, a CUDA-less torch on a GPU machine.
        NoFitError: nothing fits and no setting was given to try anyway.
        ModelNotFoundError, BadConfigError: from the model probe.
    """
    from advisor.measure.validation import validate as run_validation

    if nproc is not None and nproc < 1:
        raise UsageError(f"--nproc must be >= 1, got {nproc}")

    hw = hardware or _local_hardware_for_trials()
    notes: list[str] = []
    if plan is None:
        overrides = {k: v for k, v in (("precision", precision), ("tf32", tf32), ("optimizer", optimizer),
                                       ("gradient_checkpointing", gradient_checkpointing),
                                       ("micro_batch_size", micro_batch_size),
                                       ("gradient_accumulation_steps", gradient_accumulation_steps)) if v is not None}
        for name in ("micro_batch_size", "gradient_accumulation_steps"):
            if overrides.get(name, 1) <= 0:
                raise UsageError(f"--{name.replace('_', '-')} must be > 0, got {overrides[name]}")
        processes = nproc if nproc and nproc > 1 and hw.gpu is None else 1
        if global_batch_size is None and micro_batch_size is not None:
            global_batch_size = micro_batch_size * (gradient_accumulation_steps or 1) * processes
        if processes > 1:
            global_batch_size = global_batch_size or DEFAULT_GLOBAL_BATCH_SIZE
            if global_batch_size % processes:
                raise UsageError(f"--global-batch-size {global_batch_size} does not split over --nproc {processes}")
            global_batch_size //= processes  # the per-process batch; the processes multiply it back
        try:
            base = recommend(model, task=task, seq_len=seq_len, global_batch_size=global_batch_size, hardware=hw).plan
        except NoFitError as err:
            if not overrides or err.closest is None:
                raise
            base = err.closest.plan
        gbs = base.global_batch_size
        if "micro_batch_size" in overrides and "gradient_accumulation_steps" not in overrides:
            if gbs % overrides["micro_batch_size"]:
                raise UsageError(f"--micro-batch-size {overrides['micro_batch_size']} does not divide the global "
                                 f"batch {gbs}")
            overrides["gradient_accumulation_steps"] = gbs // overrides["micro_batch_size"]
        elif "gradient_accumulation_steps" in overrides and "micro_batch_size" not in overrides:
            if gbs % overrides["gradient_accumulation_steps"]:
                raise UsageError(f"--gradient-accumulation-steps {overrides['gradient_accumulation_steps']} does "
                                 f"not divide the global batch {gbs}")
            overrides["micro_batch_size"] = gbs // overrides["gradient_accumulation_steps"]
        if overrides.get("precision") == "fp16" and hw.gpu is None:
            raise UsageError("fp16 mixed precision needs a GPU; on the CPU use fp32 or bf16")
        if overrides.get("tf32") and (hw.gpu is None or not hw.gpu.tf32):
            raise UsageError("tf32 needs an Ampere or newer GPU")
        if processes > 1:
            overrides.update(cpu_processes=processes, parallelism=parallelism or "ddp")
        elif parallelism is not None:
            overrides["parallelism"] = parallelism
        plan = base.model_copy(update=overrides)
    if nproc and nproc > 1 and hw.gpu is not None:
        raise UsageError("--nproc is for CPU trials; on GPUs the plan's GPU count sets the processes")
    swaps = {"zero-1": "zero-2", "dp": "ddp"}
    if plan.parallelism in swaps:
        notes.append(f"{plan.parallelism} has no torch.distributed counterpart here: the trial runs "
                     f"{swaps[plan.parallelism]} ({'FSDP SHARD_GRAD_OP' if plan.parallelism == 'zero-1' else 'DDP'})")
        plan = plan.model_copy(update={"parallelism": swaps[plan.parallelism]})
    facts = make_facts(model, task=task, seq_len=seq_len, global_batch_size=plan.global_batch_size, hardware=hw)
    report = run_validation(facts, plan, steps=steps, warmup=warmup, compare=compare,
                            memory_limit_bytes=memory_limit_bytes, max_trials=max_trials, progress=progress,
                            stop=stop)
    report.warnings[:0] = notes
    return report
