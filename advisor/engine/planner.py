"""The planner: enumerate candidate plans, keep what the rules allow and memory admits, rank.

Search space: precision × tf32 × optimizer × activation checkpointing × micro-batch (divisors of
the per-device batch, so gradient accumulation is a whole number) × parallelism × offload.
Rules forbid values, mark others as fallbacks with a penalty (used only when nothing without
them fits), or prefer values. A plan fits when its ``device_bytes`` stays under capacity less
the safety margin. Ranking ('speed' objective): least total fallback penalty, then highest estimated tokens/s, then
most preferences met; the 'memory' objective ranks by least device memory first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Any

from advisor.engine.memory import MemoryEstimate, estimate_memory
from advisor.engine.speed import SpeedEstimate, estimate_speed
from probes.errors import UsageError
from rules import REGISTRY, Effect, Facts, Plan
from rules.facts import OPTIMIZERS, PARALLELISMS, PRECISIONS

SAFETY_MARGIN_GPU = 0.10  #: fraction of GPU memory kept free (fragmentation, other processes)
SAFETY_MARGIN_CPU = 0.25  #: fraction of RAM kept for the OS, the data pipeline and other programs

#: The settings the planner searches (the rest are set by rules).
SEARCHED = ("precision", "tf32", "optimizer", "gradient_checkpointing", "micro_batch_size", "parallelism", "offload",
            "tensor_parallel", "pipeline_parallel")


@dataclass
class Candidate:
    """One evaluated plan."""

    plan: Plan
    memory: MemoryEstimate
    speed: SpeedEstimate
    penalty: int
    preferences: int
    fallbacks: list[Effect] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def key(self) -> tuple:
        """Sort key for the 'speed' objective: best first."""
        return (self.penalty, -self.speed.tokens_per_s, -self.preferences)

    def memory_key(self) -> tuple:
        """Sort key for the 'memory' objective: least device memory first, then as ``key``."""
        return (self.memory.device_bytes, *self.key())


def ranking(objective: str):
    """The sort key of an objective ('speed' or 'memory')."""
    return Candidate.memory_key if objective == "memory" else Candidate.key


@dataclass
class PlanningResult:
    """Everything the planner decided, for the recommendation and its explanation."""

    facts: Facts
    best: Candidate | None
    candidates: list[Candidate]
    domains: dict[str, list[Any]]
    effects: list[Effect]  #: propose-phase effects of every rule
    check_effects: list[Effect]  #: check-phase effects on the chosen plan

    @property
    def fitting(self) -> list[Candidate]:
        return sorted((c for c in self.candidates if c.fits), key=ranking(self.facts.workload.objective))


def capacity_bytes(facts: Facts) -> int:
    """Memory a plan may use on one device: GPU memory, or host RAM when training on the CPU."""
    if facts.gpu is not None:
        return facts.gpu.memory_total_bytes
    host = facts.hardware.host
    return host.ram_bytes if host and host.ram_bytes else 0


def propose_effects(facts: Facts) -> list[Effect]:
    """Run every rule's ``propose`` on the facts."""
    effects: list[Effect] = []
    for rule in REGISTRY.values():
        effects.extend(rule.propose(facts))
    return effects


def check_effects(facts: Facts, plan: Plan) -> list[Effect]:
    """Run every rule's ``check`` on the chosen plan."""
    effects: list[Effect] = []
    for rule in REGISTRY.values():
        effects.extend(rule.check(facts, plan))
    return effects


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` (>= 1), ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def domains(facts: Facts) -> dict[str, list[Any]]:
    """Every value each searched setting could take before the rules speak.

    Raises:
        UsageError: the global batch is not divisible by the number of GPUs.
    """
    gpus = facts.hardware.num_gpus
    dp = max(gpus, 1)
    gbs = facts.workload.global_batch_size
    if gbs % dp:
        raise UsageError(f"global batch size {gbs} is not divisible by {dp} GPUs: use a multiple of {dp}")
    return {
        "precision": list(PRECISIONS),
        "tf32": [True, False],
        "optimizer": list(OPTIMIZERS),
        "gradient_checkpointing": [False, True],
        "micro_batch_size": divisors(gbs // dp),
        "parallelism": list(PARALLELISMS),
        "offload": ["none", "optimizer", "optimizer+parameters"],
        "tensor_parallel": [t for t in (1, 2, 4, 8) if t <= max(len(facts.hardware.gpus), 1)],
        "pipeline_parallel": [1] + ([facts.hardware.nodes] if facts.hardware.nodes > 1 else []),
    }


def _allowed(domain: dict[str, list[Any]], effects: list[Effect]) -> dict[str, list[Any]]:
    allowed = {}
    for setting, values in domain.items():
        allowed[setting] = [v for v in values
                            if not any(e.kind == "forbid" and e.setting == setting and e.matches(v) for e in effects)]
    return allowed


def offload_ok(parallelism: str, offload: str) -> bool:
    """Offload pairs only with sharding: ZeRO-Offload offloads the optimizer (any stage) and the
    parameters (stage 3); FSDP's CPUOffload moves parameters, gradients and the optimizer step together,
    so only 'optimizer+parameters' with FULL_SHARD / HYBRID_SHARD."""
    if offload == "none":
        return True
    if parallelism.startswith("fsdp-"):
        return offload == "optimizer+parameters" and parallelism != "fsdp-shard-grad-op"
    if offload == "optimizer":
        return parallelism.startswith("zero")
    return parallelism == "zero-3"


def evaluate(facts: Facts, plan: Plan, effects: list[Effect] | None = None) -> Candidate:
    """Memory, speed, penalty and preferences of one plan."""
    effects = effects if effects is not None else propose_effects(facts)
    margin = SAFETY_MARGIN_GPU if plan.device == "cuda" else SAFETY_MARGIN_CPU
    memory = estimate_memory(facts.model, plan, facts.workload.seq_len, capacity_bytes(facts), margin,
                             nodes=facts.hardware.nodes)
    speed = estimate_speed(facts.model, plan, facts.workload.seq_len, memory, facts.gpu, facts.hardware.host,
                           nvlink=facts.hardware.all_pairs_nvlink, nodes=facts.hardware.nodes,
                           inter_node_bytes_per_s=facts.hardware.inter_node_bytes_per_s)
    values = plan.model_dump()
    fallbacks = [e for e in effects if e.kind == "fallback" and e.setting in values and e.matches(values[e.setting])]
    prefs = sum(1 for e in effects if e.kind == "prefer" and e.setting in values and e.matches(values[e.setting]))
    return Candidate(plan=plan, memory=memory, speed=speed, penalty=sum(e.penalty for e in fallbacks),
                     preferences=prefs, fallbacks=fallbacks)


def _candidates(facts: Facts, allowed: dict[str, list[Any]], effects: list[Effect], model_parallel: bool
                ) -> list[Candidate]:
    """Every allowed plan, with (``model_parallel``) or without tensor / pipeline parallelism.

    With model parallelism the data-parallel size is GPUs / (t·p): its micro-batches divide the
    larger per-replica batch, and a single replica (t·p = GPUs) runs without a data-parallel wrapper.
    """
    device = "cpu" if facts.gpu is None else "cuda"
    gpus = facts.hardware.num_gpus
    gbs = facts.workload.global_batch_size
    out = []
    for tp, pp in product(allowed["tensor_parallel"], allowed["pipeline_parallel"]):
        if (tp * pp > 1) != model_parallel or (gpus and gpus % (tp * pp)):
            continue
        dp = max(gpus // (tp * pp), 1) if gpus else 1
        if gbs % dp:
            continue
        if model_parallel:
            micros = _allowed({"micro_batch_size": divisors(gbs // dp)}, effects)["micro_batch_size"]
            strategies = ["none"] if dp == 1 else [p for p in allowed["parallelism"] if p != "none"]
        else:
            micros, strategies = allowed["micro_batch_size"], allowed["parallelism"]
        for precision, tf32, optimizer, ckpt, micro, parallelism, offload in product(
                allowed["precision"], allowed["tf32"], allowed["optimizer"], allowed["gradient_checkpointing"],
                micros, strategies, allowed["offload"]):
            if not offload_ok(parallelism, offload):
                continue
            plan = Plan(device=device, precision=precision, tf32=tf32, optimizer=optimizer,
                        gradient_checkpointing=ckpt, micro_batch_size=micro,
                        gradient_accumulation_steps=gbs // (micro * dp), parallelism=parallelism,
                        num_gpus=gpus, offload=offload, tensor_parallel=tp, pipeline_parallel=pp)
            out.append(evaluate(facts, plan, effects))
    return out


def search(facts: Facts) -> PlanningResult:
    """Evaluate every allowed candidate and pick the best that fits (``best`` is None if none fits).

    Tensor and pipeline parallel plans are evaluated only when they could win: under the 'speed'
    objective, when no plan without them fits at a lower fallback penalty than theirs (the rules make
    model parallelism a fallback: Narayanan et al. 2021, takeaways 1-2).
    """
    effects = propose_effects(facts)
    domain = domains(facts)
    allowed = _allowed(domain, effects)
    rank = ranking(facts.workload.objective)
    candidates = _candidates(facts, allowed, effects, model_parallel=False)
    fitting = sorted((c for c in candidates if c.fits), key=rank)
    mp_penalty = min((e.penalty for e in effects if e.kind == "fallback"
                      and e.setting in ("tensor_parallel", "pipeline_parallel")), default=0)
    mp_possible = len(allowed["tensor_parallel"]) > 1 or len(allowed["pipeline_parallel"]) > 1
    if mp_possible and (facts.workload.objective == "memory" or not fitting or fitting[0].penalty >= mp_penalty):
        candidates += _candidates(facts, allowed, effects, model_parallel=True)
        fitting = sorted((c for c in candidates if c.fits), key=rank)
    best = fitting[0] if fitting else None
    checks = check_effects(facts, best.plan) if best else []
    return PlanningResult(facts=facts, best=best, candidates=candidates, domains=domain, effects=effects,
                          check_effects=checks)
