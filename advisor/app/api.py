"""The Python API: the same functions and models the CLI prints.

    from advisor import recommend, estimate, probe_hardware, profile_model
    rec = recommend("gpt2", gpu="a100-80gb")
    rec.settings["precision"].value  # 'bf16'

The keyword options of every function are declared once, in :mod:`advisor.app.options` (the CLI's
flags are made from the same declarations): ``gpu``, ``nodes``, ``interconnect``, ``inter_node_gbps``
(:class:`~advisor.app.options.HardwareOptions`); ``task``, ``seq_len``, ``global_batch_size``,
``objective`` (:class:`~advisor.app.options.WorkloadOptions`); the plan settings
(:class:`~advisor.app.options.PlanOptions`); the trial settings (:class:`~advisor.app.options.TrialOptions`).
A bad value raises the same one-line :class:`~advisor.core.errors.UsageError` the CLI prints.

Every function raises an :class:`advisor.core.errors.AdvisorError` subclass on bad input, and only those: a value of
the wrong type (``gpu=8``, ``nodes=2.5``, ``global_batch_size=True``, ``model=None``, ``hardware="x"``), NaN or
infinity, or a count beyond its limit (:mod:`advisor.core.limits`) is a :class:`~advisor.core.errors.UsageError` with the
CLI's words, never a pydantic ``ValidationError``, ``TypeError`` or ``AttributeError``.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from pydantic import BaseModel, create_model

from advisor.app.links import interconnect_update
from advisor.app.plan_flags import (estimate_plan, given_settings, require_adapters_for, require_bounded_batch,
                                    require_plan_counts, split_batch)
from advisor.app.local_runs import calibrate, calibrate_recommendation
from advisor.app.options import (DEFAULT_GLOBAL_BATCH_SIZE, DEFAULT_SEQ_LEN, CalibrationOption,
                                 OPTIONAL_PACKAGES, HardwareOptions, MethodOptions, PlanOptions, SimulateOption,
                                 StackOptions, TrialOptions, WorkloadOptions, check_given, parse)
from advisor.engine import planner
from advisor.engine.candidates import evaluate, with_bands
from advisor.engine.decisions import Warning as RuleWarning
from advisor.engine.legality import advice
from advisor.engine.memory import MemoryEstimate
from advisor.engine.recommendation import Recommendation, build
from advisor.engine.suggestions import faster_hardware, no_fit_error
from advisor.core.errors import UsageError
from advisor.app.estimate_models import Estimate, SimulatedMemory  # noqa: F401 (the API's models)
from advisor.core.extras import require
from advisor.core.limits import MAX_SIMULATED_LAYERS
from probes.gpu_catalog import profile_from_catalog
from probes.hardware import HardwareProfile
from advisor.core.kernels import Framework
from probes.model import ModelProfile, profile_model as _profile_model
from probes.nvml_probe import probe_local
from advisor.core.vocabulary import Method, Parallelism
from rules import Facts, Plan, Workload
from advisor.core.dimensions import BATCH, WORKLOAD_SETTINGS, Consumer, swapped


#: The option groups each function takes (the CLI's flags come from the same groups).
_QUESTION = (HardwareOptions, WorkloadOptions)
_RECOMMEND = (*_QUESTION, MethodOptions, StackOptions, CalibrationOption)
_ESTIMATE = (*_QUESTION, PlanOptions, SimulateOption, CalibrationOption)
_VALIDATE = (WorkloadOptions, PlanOptions, TrialOptions)


@cache
def _options(*groups: type[BaseModel]) -> type[BaseModel]:
    """One model of several option groups, made on first use (pydantic builds each class it is asked to:
    the command line pays only for the groups of the command it runs)."""
    return create_model("Options", __base__=groups, __module__=__name__)


def probe_hardware(gpu: str | None = None, nodes: int = 1, interconnect: list[str] | str | None = None,
                   inter_node_gbps: float | None = None, host_memory_bytes: int | None = None,
                   nics_per_node: int | None = None, cuda_context_bytes: int | None = None,
                   cuda_version: str | None = None) -> HardwareProfile:
    """This machine's hardware, or catalog hardware for ``gpu='NAME[:COUNT]'`` over ``nodes`` nodes.

    ``interconnect``: 'nvlink' or 'pcie' inside a node (overrides the catalog's links), 'infiniband' or
    'ethernet' between nodes (bandwidth from :data:`advisor.core.vocabulary.NETWORK_GBIT_S` unless
    ``inter_node_gbps``, in Gb/s per NIC, is given); a list or a comma-separated string. ``nics_per_node``: the
    node's network adapters, which its GPUs share (default: 1 on Ethernet, one per GPU on InfiniBand).
    ``host_memory_bytes``: RAM per node for offload (default: this machine's RAM; unknown for catalog GPUs).
    ``cuda_context_bytes``: the CUDA context's device memory per GPU, bytes (default
    :attr:`probes.hardware.HardwareProfile.context_bytes`: 500 MiB with lazy module loading, 1343 MiB without).
    ``cuda_version``: the CUDA runtime torch is built with where the plan runs ('11.8'; default: this machine's
    torch build, or a current one for ``gpu``); before 11.7 CUDA loads every kernel eagerly.

    Raises:
        UnknownGPUError: unknown catalog name or a GPU count beyond 1..:data:`advisor.core.limits.MAX_GPUS_PER_NODE`.
        UsageError: nodes outside 1..:data:`advisor.core.limits.MAX_NODES`, a value of the wrong type, NaN or infinity,
            an unknown or contradictory interconnect, a ``cuda_version`` that is not X.Y.
    """
    if isinstance(interconnect, (list, tuple)):
        if not all(isinstance(name, str) for name in interconnect):
            raise UsageError(f"--interconnect {interconnect!r}: give link names (nvlink, pcie, infiniband, ethernet)")
        interconnect = ",".join(interconnect)
    given = dict(gpu=gpu, nodes=nodes, interconnect=interconnect, inter_node_gbps=inter_node_gbps,
                 nics_per_node=nics_per_node, host_memory_bytes=host_memory_bytes, cuda_context_bytes=cuda_context_bytes,
                 cuda_version=cuda_version)
    return _hardware(parse(HardwareOptions, given))


def _hardware(opts: BaseModel) -> HardwareProfile:
    """The hardware of validated hardware options (see :func:`probe_hardware`)."""
    if opts.gpu:
        profile = profile_from_catalog(opts.gpu, opts.nodes)
    else:
        profile = probe_local()
        if opts.nodes > 1:
            profile = profile.model_copy(update={"nodes": opts.nodes})
    update = interconnect_update(profile, opts.interconnect)
    for option, field in (("inter_node_gbps", "inter_node_gbit_s"), ("host_memory_bytes", "host_memory_bytes"),
                          ("nics_per_node", "nics_per_node"), ("cuda_context_bytes", "cuda_context_bytes"),
                          ("cuda_version", "cuda_version")):
        if getattr(opts, option) is not None:
            update[field] = getattr(opts, option)
    return profile.model_copy(update=update) if update else profile


def profile_model(model: str, task: str | None = None) -> ModelProfile:
    """Resolve and profile a model (see :func:`probes.model.profile_model`).

    Raises:
        UsageError: ``model`` not a non-empty string of at most :data:`advisor.core.limits.MAX_MODEL_ID` characters, a
            task the model's family has no head for. ModelNotFoundError: no config.json. BadConfigError: a
            config.json that is not JSON or whose sizes the profile cannot use (:mod:`probes.config_check`).
    """
    return _profile_model(model, task)


def _packages(hardware: HardwareProfile) -> dict[str, bool]:
    """Optional packages found here; unknown (empty) when planning for other hardware."""
    installed = hardware.installed
    return {} if installed is None else {name: installed.get(name) is not None for name in OPTIONAL_PACKAGES}


def make_facts(model: str | ModelProfile, *, hardware: HardwareProfile | None = None, **options: Any) -> Facts:
    """Gather and validate the facts of a question (``options``: hardware and workload options).

    Raises:
        UsageError: a bad option (seq-len or batch <= 0, seq-len beyond the model's max positions, ...).
        ModelNotFoundError, BadConfigError, UnknownGPUError: from the probes.
    """
    return _facts(model, parse(_options(*_QUESTION), options), hardware)


def _facts(model: str | ModelProfile, opts: BaseModel, hardware: HardwareProfile | None) -> Facts:
    """The facts of validated options with the workload's fields (and, without ``hardware``, the hardware
    options): see :func:`make_facts`."""
    check_given(hardware)
    profile = model if isinstance(model, ModelProfile) else profile_model(model, opts.task)
    hw = hardware or _hardware(opts)
    limit = profile.max_position_embeddings
    seq_len = opts.seq_len
    if seq_len is None:
        seq_len = min(limit, DEFAULT_SEQ_LEN) if limit else DEFAULT_SEQ_LEN
    elif limit and seq_len > limit:
        raise UsageError(f"--seq-len {seq_len} is beyond {profile.id}'s {limit} positions")
    method = getattr(opts, "method", None)
    method = None if method == "auto" else method
    if opts.from_scratch and method and Method.of(method).spec.adapters:
        raise UsageError(f"--method {method} trains adapters over pretrained weights: it cannot pre-train "
                         "(--from-scratch)")
    require_adapters_for(opts, method, opts.from_scratch)
    given = {k: getattr(opts, k) for k in ("mean_sample_len", *WORKLOAD_SETTINGS)
             if getattr(opts, k, None) is not None}
    workload = Workload(seq_len=seq_len, global_batch_size=opts.global_batch_size or DEFAULT_GLOBAL_BATCH_SIZE,
                        objective=opts.objective, from_scratch=opts.from_scratch, method=method, **given)
    facts = Facts(hardware=hw, model=profile, workload=workload, packages=_packages(hw))
    planner.require_runnable_pins(facts)
    return facts


def recommend(model: str | ModelProfile, *, hardware: HardwareProfile | None = None, **options: Any
              ) -> Recommendation:
    """Recommend the fastest plan that fits (``objective='memory'``: the least device memory within
    :data:`advisor.engine.candidates.MEMORY_SPEED_TOLERANCE` of the fastest plan).

    ``options``: hardware and workload options (module docstring); ``hardware`` replaces the probe.

    Raises:
        NoFitError: nothing fits; ``str(err)`` says what would (also on ``err.suggestions``).
        UsageError, ModelNotFoundError, BadConfigError, UnknownGPUError: bad input (a value of the wrong type or
            beyond its limit, ``hardware`` not a HardwareProfile: UsageError).
    """
    opts = parse(_options(*_RECOMMEND), options)
    result = planner.search(_facts(model, opts, hardware))
    if result.best is None:
        raise no_fit_error(result)
    return calibrate_recommendation(build(result, suggestions=faster_hardware(result)), opts.no_local_calibration)


def estimate(model: str | ModelProfile, *, hardware: HardwareProfile | None = None, **options: Any) -> Estimate:
    """Memory and speed of one given plan (no search).

    ``options``: hardware and workload options, the plan settings (defaults:
    :func:`advisor.app.plan_flags.estimate_plan`) and ``simulate`` (also run a training step on fake tensors; imports
    torch; ``result.simulated.timeline`` holds its allocations by kind, which
    :func:`advisor.app.timeline.write_timeline` draws). A ``global_batch_size`` sets the accumulation (or, given an accumulation alone, the micro-batch) that makes
    it over the plan's data-parallel replicas (:func:`advisor.app.plan_flags.split_batch`); without one the global
    batch is micro-batch × accumulation × replicas.

    Raises:
        UsageError: a value outside its range (batch <= 0, ...) or of the wrong type, a global batch the micro-batch,
            accumulation and replicas cannot make, or a plan the rules refuse (ZeRO on one GPU, offload without
            sharding, ...: :func:`advisor.engine.planner.check_plan`), ``simulate`` of a model deeper than
            :data:`~advisor.core.limits.MAX_SIMULATED_LAYERS` blocks (the fake step's work, with the number).
        ModelNotFoundError, BadConfigError, UnknownGPUError: from the probes.
    """
    opts = parse(_options(*_ESTIMATE), options)
    settings = given_settings(opts)
    micro = settings.get("micro_batch_size", 1) * settings.get("gradient_accumulation_steps", 1)
    facts = _facts(model, opts.model_copy(update={"global_batch_size": micro}), hardware)
    plan = estimate_plan(facts, settings)
    if opts.global_batch_size is not None:  # the accumulation (or micro-batch) that makes it
        batch = settings if set(BATCH) & settings.keys() else {
            **settings, "micro_batch_size": plan.micro_batch_size}
        plan = estimate_plan(facts, split_batch(opts.global_batch_size, batch, plan.data_parallel_size))
    require_adapters_for(opts, plan.method)
    require_bounded_batch(plan)
    planner.require_legal(facts, plan)
    # LitGPT builds its LM head apart from the embedding (ModelProfile.untied): priced with its own parameters
    model_here = facts.model.untied() if plan.framework == Framework.LITGPT else facts.model
    facts = facts.model_copy(update={"workload": facts.workload.model_copy(
        update={"global_batch_size": plan.global_batch_size}), "model": model_here})
    candidate = evaluate(facts, plan)
    simulated = _simulate(facts, plan, candidate.memory) if opts.simulate else None
    warnings = [RuleWarning(rule_id=e.rule_id, message=e.reason) for e in advice(facts, plan)]
    memory, speed = with_bands(candidate.memory, candidate.speed, plan, facts.gpu.cc[0] if facts.gpu else None)
    speed = calibrate(speed, plan, facts.hardware, opts.no_local_calibration)  # the runs measured here (advisor runs)
    return Estimate(plan=plan, memory=memory, speed=speed, simulated=simulated,
                    model=facts.model, workload=facts.workload, warnings=warnings)


def _simulate(facts: Facts, plan: Plan, memory: MemoryEstimate) -> SimulatedMemory:
    require("trial", "estimate --simulate (a training step on fake tensors)")
    if facts.model.num_layers > MAX_SIMULATED_LAYERS:  # the fake step's work grows with its blocks
        raise UsageError(f"--simulate runs a fake step block by block, and {facts.model.id} has {facts.model.num_layers:,}"
                         f" blocks, more than the {MAX_SIMULATED_LAYERS} it simulates (0.1 CPU-s each): estimate without it")
    from advisor.engine.allocator import device_bytes
    from advisor.engine.memory import persistent_bytes
    from advisor.measure.simulate import simulate as run_simulation

    result = run_simulation(facts.model, plan, facts.workload.seq_len)
    simulated = SimulatedMemory(peak_bytes=result.peak_bytes, device_bytes=device_bytes(
        result.peak_bytes, plan, memory.components.cuda_context_bytes, persistent_bytes(memory.components)),
        peak_phase=result.peak_phase, phase_peaks_bytes=result.phase_peaks,
        analytic_error=memory.peak_bytes / result.peak_bytes - 1, wall_s=result.wall_s)
    simulated._timeline = result.timeline  # drawn by advisor estimate --timeline (advisor.app.timeline)
    return simulated


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


def _plan_to_validate(facts: Facts, opts: BaseModel, processes: int) -> Plan:
    """This machine's best plan with the given settings over it (the closest plan when nothing fits but a
    setting was given to try anyway).

    Raises:
        NoFitError: nothing fits and no setting was given. UsageError: a setting that does not divide the batch.
    """
    result = planner.search(facts, runs_on=Consumer.TRIAL)  # only plans a trial runs as they were priced
    if result.best is None and (not given_settings(opts) or not result.candidates):
        raise no_fit_error(result)
    base = (result.best or min(result.candidates, key=lambda c: c.memory.device_bytes)).plan
    return _with_settings(base, opts, processes)


def _with_settings(base: Plan, opts: BaseModel, processes: int = 1, global_batch_size: int | None = None) -> Plan:
    """``base`` with the plan settings given in ``opts`` over it: a micro-batch alone keeps the global batch
    (``global_batch_size``, default the base's) by changing the accumulation, and the other way round; a new global
    batch alone keeps the base's micro-batch. ``processes`` > 1: a CPU run over that many processes.

    Raises:
        UsageError: a setting that does not divide the batch (:func:`advisor.app.plan_flags.split_batch`).
    """
    overrides = given_settings(opts)
    parallelism = overrides.pop("parallelism", None)
    gbs = global_batch_size or base.global_batch_size
    if gbs != base.global_batch_size and not set(BATCH) & overrides.keys():
        overrides["micro_batch_size"] = base.micro_batch_size
    replicas = base.model_copy(update=overrides).data_parallel_size
    overrides = split_batch(gbs, overrides, replicas)
    if processes > 1:
        overrides.update(cpu_processes=processes, parallelism=parallelism or Parallelism.DDP)
    elif parallelism is not None:
        overrides["parallelism"] = parallelism
    return base.model_copy(update=overrides)


def validate(model: str | ModelProfile, *, plan: Plan | None = None, hardware: HardwareProfile | None = None,
             progress=None, stop=None, **options: Any):
    """Validate a plan with short trial steps on this machine's device (see :mod:`advisor.measure.validation`).

    The plan: ``plan`` when given (e.g. from a recommendation's JSON), else this machine's recommendation, with the
    given plan settings overriding it (a micro-batch alone keeps the global batch by changing the accumulation; a
    global batch alone keeps the micro-batch). Several GPUs here: the plan's DDP / ZeRO-2 / ZeRO-3 runs through
    torchrun (ZeRO as FSDP; ZeRO-1 is tried as ZeRO-2). On the CPU, ``nproc`` > 1 runs ``parallelism`` ('ddp' by
    default) over that many processes with the gloo backend, the global batch split between them. ``options``:
    workload options, plan settings and trial options (module docstring). Imports torch.

    Returns:
        ValidationReport (``verdict``, ``trials``, ``confirmed_plan``; ``comparison`` with ``compare``).
    Raises:
        UsageError: inconsistent settings (micro-batch × accumulation not the global batch), a value of the wrong
            type or beyond its limit, ``plan`` / ``hardware`` of the wrong type, a plan the rules refuse here, a
            CUDA-less torch on a GPU machine.
        NoFitError: nothing fits and no setting was given to try anyway.
        ModelNotFoundError, BadConfigError: from the model probe.
    """
    require("trial", "advisor validate (trial steps on this machine)")
    from advisor.measure.validation import validate as run_validation

    opts = parse(_options(*_VALIDATE), options)
    check_given(hardware, plan)
    hw = hardware or _local_hardware_for_trials()
    if opts.nproc and opts.nproc > 1 and hw.gpu is not None:
        raise UsageError("--nproc is for CPU trials; on GPUs the plan's GPU count sets the processes")
    profile = model if isinstance(model, ModelProfile) else profile_model(model, opts.task)
    if plan is None:
        processes = opts.nproc if opts.nproc and opts.nproc > 1 and hw.gpu is None else 1
        gbs = opts.global_batch_size
        if gbs is None and opts.micro_batch_size is not None:
            gbs = opts.micro_batch_size * (opts.gradient_accumulation_steps or 1) * processes
        if processes > 1:
            gbs = gbs or DEFAULT_GLOBAL_BATCH_SIZE
            if gbs % processes:
                raise UsageError(f"--global-batch-size {gbs} does not split over --nproc {processes}")
            gbs //= processes  # the per-process batch; the processes multiply it back
        facts = _facts(profile, opts.model_copy(update={"global_batch_size": gbs}), hw)
        plan = _plan_to_validate(facts, opts, processes)
    else:  # the settings given override the file's plan, as they override the recommendation
        require_plan_counts(plan)
        plan = _with_settings(plan, opts, global_batch_size=opts.global_batch_size)
    require_bounded_batch(plan)
    require_adapters_for(opts, plan.method)
    plan, notes = swapped(Consumer.TRIAL, plan)  # what a trial runs in place of a setting (the table's swaps)
    facts = _facts(profile, opts.model_copy(update={"global_batch_size": plan.global_batch_size}), hw)
    report = run_validation(facts, plan, steps=opts.steps, warmup=opts.warmup, compare=opts.compare,
                            memory_limit_bytes=opts.memory_limit_bytes, max_trials=opts.max_trials,
                            progress=progress, stop=stop, max_seconds=opts.max_seconds)
    report.warnings[:0] = notes
    return report


def _sign(function, groups: tuple[type[BaseModel], ...]) -> None:
    """Show the option groups' fields as the keyword-only parameters of ``function`` (``help()``, IDEs):
    the signature is made from the one declaration, like the CLI's flags."""
    signature = inspect.signature(function)
    fixed = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    names = {p.name for p in fixed}
    fields = {name: field for group in groups for name, field in group.model_fields.items()}
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=field.annotation)
             for name, field in fields.items() if name not in names]
    function.__signature__ = signature.replace(parameters=fixed + extra)


for _function, _groups in ((make_facts, _QUESTION), (recommend, _RECOMMEND), (estimate, _ESTIMATE),
                          (validate, _VALIDATE)):
    _sign(_function, _groups)
