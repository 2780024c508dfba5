"""One priced plan (:class:`Candidate`), how a plan is priced (:func:`evaluate`: memory, speed and the rules'
penalties and preferences) and how the plans that fit are ranked (:func:`order`): what the planner's search, the
explanations and ``advisor estimate`` share."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import Callable

from advisor.engine.bands import band
from advisor.engine.legality import propose_effects
from advisor.engine.memory import MemoryEstimate, estimate_memory
from advisor.engine.speed import SpeedEstimate, estimate_speed
from advisor.core.vocabulary import Device, Objective, Penalty, Precision
from rules import Effect, Facts, Plan

SAFETY_MARGIN_GPU = 0.10  #: fraction of GPU memory kept free (fragmentation, other processes)
SAFETY_MARGIN_CPU = 0.25  #: fraction of RAM kept for the OS, the data pipeline and other programs


def safety_margin(device: str) -> float:
    """The fraction of a device's memory a plan on ``device`` keeps free (:data:`SAFETY_MARGIN_GPU` on CUDA, else
    :data:`SAFETY_MARGIN_CPU`)."""
    return SAFETY_MARGIN_GPU if device == Device.CUDA else SAFETY_MARGIN_CPU


def nothing_fits(facts: Facts) -> bool:
    """Whether no plan can fit, before any is priced: the device memory every plan holds whatever its settings (the
    CUDA context and library workspaces) already passes the usable memory (capacity less the safety margin)."""
    if facts.gpu is None:
        return False
    return facts.hardware.context_bytes > facts.gpu.memory_total_bytes * (1 - safety_margin(Device.CUDA))


@dataclass
class Candidate:
    """One evaluated plan: its memory at once, its speed when first read (:attr:`speed`: most plans a search prices
    do not fit, and nothing ranks or shows their speed)."""

    plan: Plan
    memory: MemoryEstimate
    price_speed: Callable[[], SpeedEstimate] = field(repr=False)
    penalty: int
    preferences: int
    fallbacks: list[Effect] = field(default_factory=list)
    _speed: SpeedEstimate | None = field(default=None, repr=False)

    @property
    def speed(self) -> SpeedEstimate:
        """The plan's speed estimate (:func:`advisor.engine.speed.estimate_speed`), priced once on first read."""
        if self._speed is None:
            self._speed = self.price_speed()
        return self._speed

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def risky(self) -> int:
        """How many of its fallbacks are risky (:attr:`Penalty.RISKY`: convergence may suffer, or a framework beyond
        the Trainer)."""
        return sum(1 for e in self.fallbacks if e.penalty == Penalty.RISKY)

    def key(self) -> tuple:
        """Sort key for the 'speed' objective, best first: the least fallback penalty; at equal penalty the fewest
        risky fallbacks (a plan that is only slower beats one whose convergence may suffer: 8-bit AdamW with
        activation checkpointing before Adafactor, whose rules take it "only when neither AdamW nor 8-bit Adam
        fits"); then the fastest, then the most preferences met."""
        return (self.penalty, self.risky, -self.speed.tokens_per_s, -self.preferences)

    def memory_key(self) -> tuple:
        """Sort key among the plans the 'memory' objective may pick: least device memory first, then as ``key``."""
        return (self.memory.device_bytes, *self.key())


#: The 'memory' objective's speed tolerance: it takes the least device memory among the plans that fit within 10 %
#: of the fastest plan's tokens/s and pay no fallback the fastest plan does not pay (no checkpointing, Adafactor,
#: adapters or offload that speed did not need). A stated trade, not a fit: memory saved below that costs more time
#: than a user who asked for headroom, not for a slower run, would accept.
MEMORY_SPEED_TOLERANCE = 0.10


def order(fitting: list[Candidate], objective: str) -> list[Candidate]:
    """The plans that fit, best first under ``objective``: 'speed' by :meth:`Candidate.key`; 'memory' the plans
    within :data:`MEMORY_SPEED_TOLERANCE` of the fastest (at its penalty) by least memory, then the others."""
    by_speed = sorted(fitting, key=Candidate.key)
    if objective != Objective.MEMORY or not by_speed:
        return by_speed
    fastest = by_speed[0]
    floor = (1 - MEMORY_SPEED_TOLERANCE) * fastest.speed.tokens_per_s
    near = [c for c in by_speed if c.penalty <= fastest.penalty and c.speed.tokens_per_s >= floor]
    rest = [c for c in by_speed if not (c.penalty <= fastest.penalty and c.speed.tokens_per_s >= floor)]
    return sorted(near, key=Candidate.memory_key) + rest


def capacity_bytes(facts: Facts) -> int:
    """Memory a plan may use on one device: GPU memory, or host RAM when training on the CPU."""
    if facts.gpu is not None:
        return facts.gpu.memory_total_bytes
    host = facts.hardware.host
    return host.ram_bytes if host and host.ram_bytes else 0


@dataclass(frozen=True)
class Pricing:
    """What pricing a plan reads from the facts and the rules, worked out once per search (the planner
    prices thousands of plans): capacity (bytes), links, the network (bytes/s) and the effects that rank."""

    capacity_bytes: int
    host_capacity_bytes: int | None
    cuda_context_bytes: int
    nvlink: bool
    inter_node_bytes_per_s: float
    fallbacks: tuple[Effect, ...]
    preferences: tuple[Effect, ...]
    #: the plans priced so far by their :func:`_priced_key`: a plan that differs from one of them only where neither
    #: memory nor speed reads takes its figures (a search prices each once)
    priced: dict = field(default_factory=dict, compare=False, repr=False)
    #: the (fallbacks, preferences) a plan pays and meets, by the values of the settings the effects read
    #: (:meth:`judge`: many plans share them)
    judged: dict = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def _judged_key(self) -> Callable[[dict], tuple]:
        """The values of a plan's settings the fallbacks and preferences read (their own and their ``when``'s)."""
        reads = {e.setting for e in (*self.fallbacks, *self.preferences)}
        reads.update(k for e in (*self.fallbacks, *self.preferences) for k in (e.when or {}))
        getter = itemgetter(*sorted(reads)) if reads else (lambda _: ())
        return lambda values: (getter(values),)

    def judge(self, plan: Plan) -> tuple[list[Effect], int]:
        """The fallbacks ``plan`` pays and how many preferences it meets."""
        values = plan.__dict__
        key = self._judged_key(values)
        hit = self.judged.get(key)
        if hit is None:
            fallbacks = [
                e for e in self.fallbacks if e.matches(values[e.setting]) and (not e.when or e.applies(values))
            ]
            prefs = sum(
                1 for e in self.preferences if e.matches(values[e.setting]) and (not e.when or e.applies(values))
            )
            hit = self.judged[key] = (fallbacks, prefs)
        return hit

    @classmethod
    def of(cls, facts: Facts, effects: list[Effect]) -> Pricing:
        return cls(
            capacity_bytes=capacity_bytes(facts),
            host_capacity_bytes=facts.hardware.host_memory,
            cuda_context_bytes=facts.hardware.context_bytes,
            nvlink=facts.hardware.nvlink_ring,
            inter_node_bytes_per_s=facts.hardware.inter_node_bytes_per_s,
            fallbacks=tuple(e for e in effects if e.kind == "fallback" and e.setting in Plan.model_fields),
            preferences=tuple(e for e in effects if e.kind == "prefer" and e.setting in Plan.model_fields),
        )


def with_bands(
    memory: MemoryEstimate, speed: SpeedEstimate, plan: Plan, cc_major: int | None
) -> tuple[MemoryEstimate, SpeedEstimate]:
    """The estimates with their bands set (``MemoryEstimate.band``, ``SpeedEstimate.step_time_band``:
    :func:`advisor.engine.bands.band` of the plan's class on a GPU of compute capability ``cc_major``)."""
    return (
        memory.model_copy(update={"band": band("memory", plan, cc_major)}),
        speed.model_copy(update={"step_time_band": band("step_time", plan, cc_major)}),
    )


def evaluate(
    facts: Facts, plan: Plan, effects: list[Effect] | None = None, pricing: Pricing | None = None
) -> Candidate:
    """Memory, speed, penalty and preferences of one plan (``pricing``: :class:`Pricing` of the facts and
    effects, when the caller prices many plans)."""
    if pricing is None:
        pricing = Pricing.of(facts, effects if effects is not None else propose_effects(facts))
    key = _priced_key(plan)
    twin = pricing.priced.get(key)
    if twin is not None:
        memory, speed = twin.memory, (lambda: twin.speed)
    else:
        memory, speed = _price(facts, plan, pricing)
    fallbacks, prefs = pricing.judge(plan)
    fallbacks = list(fallbacks)
    candidate = Candidate(
        plan=plan,
        memory=memory,
        price_speed=speed,
        penalty=sum(e.penalty for e in fallbacks),
        preferences=prefs,
        fallbacks=fallbacks,
    )
    if twin is None:
        pricing.priced[key] = candidate
    return candidate


def unpriced(plan: Plan) -> tuple[str, ...]:
    """The settings neither memory nor speed reads for ``plan``: TF32 under 16-bit mixed precision (the matmuls run in
    bf16 / fp16, :func:`advisor.engine.speed.device_rates`; no memory model reads it)."""
    return () if plan.precision == Precision.FP32 else ("tf32",)


def _priced_key(plan: Plan) -> tuple:
    """What a plan's memory and speed read: its settings, less :func:`unpriced`'s."""
    blind = unpriced(plan)
    if not blind:
        return tuple(plan.__dict__.values())
    return tuple({**plan.__dict__, **dict.fromkeys(blind)}.values())


def _price(facts: Facts, plan: Plan, pricing: Pricing) -> tuple[MemoryEstimate, Callable[[], SpeedEstimate]]:
    """The plan's memory estimate, and how to price its speed (when first read)."""
    margin = safety_margin(plan.device)
    hw = facts.hardware
    memory = estimate_memory(
        facts.model,
        plan,
        facts.workload.seq_len,
        pricing.capacity_bytes,
        margin,
        nodes=hw.nodes,
        host_capacity_bytes=pricing.host_capacity_bytes,
        cuda_context_bytes=pricing.cuda_context_bytes,
    )

    def speed() -> SpeedEstimate:
        return estimate_speed(
            facts.model,
            plan,
            facts.workload.seq_len,
            memory,
            facts.gpu,
            hw.host,
            nvlink=pricing.nvlink,
            nodes=hw.nodes,
            inter_node_bytes_per_s=pricing.inter_node_bytes_per_s,
            mean_sample_len=facts.workload.mean_sample_len,
        )

    return memory, speed
