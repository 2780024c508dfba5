"""When nothing fits: what would (a larger catalog GPU, more GPUs with sharding and offload), and the
:class:`~advisor.core.errors.NoFitError` that carries it; when a plan fits but is slow (offload, or fallbacks up to a
risky one): the catalog GPU that would run it much faster (:func:`faster_hardware`)."""

from __future__ import annotations

from advisor.engine import planner
from advisor.engine.candidates import Candidate, nothing_fits, safety_margin
from advisor.engine.bands import Verdict
from advisor.engine.legality import no_layout_error
from advisor.core.errors import NoFitError, UsageError
from probes.gpu_catalog import catalog, profile_from_catalog
from advisor.core.units import GIB
from advisor.core.vocabulary import Device, Method, Offload, Parallelism, Penalty
from rules import Facts

#: GPU counts tried for "more GPUs" (a node holds up to 8; more are whole nodes of 8).
GPU_COUNTS = (2, 4, 8, 16, 32, 64)
GPUS_PER_NODE = 8


def _fits_with(facts: Facts, gpu: str, nodes: int = 1) -> Candidate | None:
    """The best plan on catalog hardware ``gpu`` over ``nodes`` (None: nothing fits), with the settings the question
    gave its own hardware (network, host RAM, CUDA context and version: :meth:`HardwareProfile.with_settings_of`)."""
    hw = profile_from_catalog(gpu, nodes).with_settings_of(facts.hardware)
    other = facts.model_copy(update={"hardware": hw, "packages": {}})
    if nothing_fits(other):  # the CUDA context alone passes the usable memory: no count of these GPUs helps
        return None
    return planner.search(other, best_only=True, closest=False).best  # whether one fits, not the closest


def _larger_gpu(facts: Facts) -> str | None:
    current = facts.gpu.memory_total_bytes if facts.gpu else 0
    for entry in sorted(catalog().values(), key=lambda e: e.total_bytes):
        if entry.total_bytes <= current:
            continue
        best = _fits_with(facts, entry.id)
        if best is not None:
            p = best.plan
            return f"a larger GPU: --gpu {entry.id} ({entry.total_bytes / GIB:.3g} GiB) fits with {p.describe()}"
    return None


def _more_gpus(facts: Facts, base: str) -> str | None:
    """The fewest GPUs of :data:`GPU_COUNTS` (dividing the global batch) on which a plan fits, in words; None.

    A plan's memory per GPU does not grow with more GPUs of the same kind (the states shard over more ranks, each
    replica's batch shrinks, tensor parallel stays inside a node), so whether a plan fits is monotone in the count:
    the largest count is tried first (nothing fits there: no smaller count is searched), then the fewest that fits
    is found by bisection (what bounds the no-fit answer: at most three searches of six counts, not six)."""
    counts = [c for c in GPU_COUNTS if facts.workload.global_batch_size % c == 0]
    found = {len(counts) - 1: _fits_with(facts, *_where(base, counts[-1]))} if counts else {}
    if not found or found[len(counts) - 1] is None:
        return None
    low, high = 0, len(counts) - 1  # the fewest that fits lies in counts[low..high]; counts[high] fits
    while low < high:
        mid = (low + high) // 2
        found[mid] = _fits_with(facts, *_where(base, counts[mid]))
        low, high = (low, mid) if found[mid] is not None else (mid + 1, high)
    best = found[high]
    gpu, nodes = _where(base, counts[high])
    where = f"--gpu {gpu}" + (f" --nodes {nodes}" if nodes > 1 else "")
    p = best.plan
    how = [p.parallelism] if p.parallelism != Parallelism.NONE else []
    how += [f"tensor parallel {p.tensor_parallel}"] if p.tensor_parallel > 1 else []
    how += [f"pipeline parallel {p.pipeline_parallel}"] if p.pipeline_parallel > 1 else []
    how += [f"context parallel {p.context_parallel}"] if p.context_parallel > 1 else []
    how += [f"expert parallel {p.expert_parallel}"] if p.expert_parallel > 1 else []
    how += ["the optimizer step in backward"] if p.optimizer_in_backward else []
    how += ["activation offloading"] if p.activation_offloading else []
    how += [f"{p.offload} offload"] if p.offload != Offload.NONE else []
    return f"more GPUs: {where} fits with {', '.join(how) or 'data parallel'}"


def _where(base: str, count: int) -> tuple[str, int]:
    """``count`` GPUs of catalog ``base`` as (``base:per-node``, nodes): up to :data:`GPUS_PER_NODE` a node."""
    return f"{base}:{min(count, GPUS_PER_NODE)}", max(count // GPUS_PER_NODE, 1)


def _adapters(facts: Facts) -> list[str]:
    """Adapter methods that fit when the asked-for method (full fine-tuning) does not, with their memory."""
    w = facts.workload
    if w.method is None or w.from_scratch or Method.of(w.method).spec.adapters:
        return []
    found = []
    for method in (Method.LORA, Method.QLORA):
        workload = w.model_copy(update={"method": method.value})
        best = planner.search(facts.model_copy(update={"workload": workload}), best_only=True).best
        if best is not None:
            found.append(
                f"--method {method}: {best.memory.device_bytes / GIB:.1f} GiB per GPU "
                f"(trains r={best.plan.lora_rank} adapters, not every weight)"
            )
    return found


def suggestions(facts: Facts) -> list[str]:
    """What would fit when nothing does, one phrase each: LoRA / QLoRA when full fine-tuning was asked for, a
    larger GPU, more GPUs (sharded, with offload), else a shorter sequence or a smaller model."""
    found: list[str] = _adapters(facts)
    if facts.gpu is None:
        found.append("plan for a GPU with --gpu NAME (see `advisor probe --gpu LIST`)")
    larger = _larger_gpu(facts)
    if larger:
        found.append(larger)
    base = facts.gpu.catalog_id if facts.gpu is not None and facts.gpu.catalog_id else None
    more = _more_gpus(facts, base) if base else None
    if more:
        found.append(more)
    if not found:
        found.append("a shorter --seq-len or a smaller model")
    return found


#: How much faster a catalog GPU must run the workload before a fitting plan's suggestions name it.
FASTER_FACTOR = 2.0
#: The catalog GPU "slow, consider" compares with: the one with the most memory (fewest fallbacks needed), and
#: the next when the plan already runs on it.
FASTEST_GPUS = ("h200", "h100-sxm")


#: The catalog GPU a plan for a machine without one is compared with (one best-only search): a common one to rent.
CPU_COMPARED_GPU = "a100-80gb"


def on_a_gpu(result: planner.PlanningResult) -> list[str]:
    """For a plan on a machine without a GPU (a CPU plan, often minutes a step): what one
    :data:`CPU_COMPARED_GPU` would run, in tokens/s and times this plan's, and the command that ranks every catalog
    GPU. One best-only search; an empty list for a plan on a GPU or no plan."""
    facts, best = result.facts, result.best
    if best is None or facts.gpu is not None:
        return []
    here = f"no GPU here: {best.speed.step_time_s:,.3g} s a step on this CPU ({best.speed.tokens_per_s:,.0f} tokens/s)"
    compare = f"`advisor compare --model {facts.model.id}` ranks every GPU"
    found = _fits_with(facts, CPU_COMPARED_GPU)
    if found is None:
        return [f"{here}; one {CPU_COMPARED_GPU} cannot hold it either; {compare}"]
    return [
        f"{here}; on --gpu {CPU_COMPARED_GPU}: {found.speed.tokens_per_s:,.0f} tokens/s "
        f"({found.speed.tokens_per_s / best.speed.tokens_per_s:,.0f}x); {compare}"
    ]


def faster_hardware(result: planner.PlanningResult) -> list[str]:
    """ "Slow, consider X" for a plan that fits: when it offloads (every step crosses PCIe) or pays fallbacks up to
    a risky one (tensor parallel, Adafactor, adapters), the same number of catalog GPUs of the largest kind, if
    they run the workload at least :data:`FASTER_FACTOR` x faster. One search, so only for such plans; a plan on
    the CPU: :func:`on_a_gpu`."""
    facts, best = result.facts, result.best
    if facts.gpu is None:
        return on_a_gpu(result)
    if best is None:
        return []
    offload = Offload.of(best.plan.offload) != Offload.NONE
    if not offload and best.penalty < Penalty.RISKY:
        return []
    other = next(g for g in FASTEST_GPUS if g != facts.gpu.catalog_id)
    count = len(facts.hardware.gpus)
    found = _fits_with(facts, f"{other}:{count}", facts.hardware.nodes)
    if found is None or found.speed.tokens_per_s < FASTER_FACTOR * best.speed.tokens_per_s:
        return []
    why = (
        "offloads to the CPU"
        if offload
        else "falls back on "
        + ", ".join(
            dict.fromkeys(
                f"{e.setting}={e.value if not isinstance(e.value, list) else getattr(best.plan, e.setting)}"
                for e in best.fallbacks
            )
        )
    )
    return [
        f"slow: this plan {why} (est. {best.speed.tokens_per_s:,.0f} tokens/s); consider --gpu {other}:{count}"
        + (f" --nodes {facts.hardware.nodes}" if facts.hardware.nodes > 1 else "")
        + f": {found.plan.describe()}, est. {found.speed.tokens_per_s:,.0f} tokens/s "
        f"({found.speed.tokens_per_s / best.speed.tokens_per_s:.1f}x)"
    ]


def no_fit_error(result: planner.PlanningResult) -> NoFitError | UsageError:
    """The error for a search where nothing fits: the smallest plan's memory and what would fit; a UsageError when
    no plan could even be priced (the settings asked for rule every layout out: :func:`legality.no_layout_error`)."""
    facts = result.facts
    if nothing_fits(facts):  # the search priced nothing (planner.search): the context alone passes the memory
        usable = facts.gpu.memory_total_bytes * (1 - safety_margin(Device.CUDA))
        summary = (
            f"no plan fits {facts.model.id} on {facts.gpu.name}: the CUDA context alone takes "
            f"{facts.hardware.context_bytes / GIB:.1f} GiB of {usable / GIB:.1f} GiB usable"
        )
        ideas = suggestions(facts)
        return NoFitError(f"{summary}; would fit: {'; '.join(ideas)}", summary=summary, suggestions=ideas)
    if not result.candidates:
        return no_layout_error(facts, result.effects)
    closest = min(result.candidates, key=lambda c: c.memory.device_bytes)
    ideas = suggestions(facts)
    where = facts.gpu.name if facts.gpu else "the CPU's RAM"
    summary = (
        f"no plan fits {facts.model.id} at seq-len {facts.workload.seq_len} on {where}: the smallest "
        f"needs {closest.memory.device_bytes / GIB:.1f} GiB of {closest.memory.usable_bytes / GIB:.1f} GiB "
        "usable"
    )
    if closest.memory.verdict == Verdict.TIGHT:  # within the model's error of the capacity: it may run
        summary += (
            f" (tight: {closest.memory.device_bytes / closest.memory.capacity_bytes:.0%} of the "
            f"{closest.memory.capacity_bytes / GIB:.1f} GiB capacity, it may run: validate it first)"
        )
    return NoFitError(f"{summary}; would fit: {'; '.join(ideas)}", summary=summary, suggestions=ideas, closest=closest)
