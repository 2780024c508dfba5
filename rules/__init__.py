"""The knowledge base: one module per topic; importing this package registers every rule."""

from rules import (
    batch,
    compile,
    context_parallel,
    experts,
    fsdp,
    hardware_health,
    input_pipeline,
    memory_savers,
    method,
    model_parallel,
    optimizer,
    parallelism,
    precision,
    stack,
)
from rules.base import REGISTRY, Effect, Rule, RuleInfo, Source, info
from rules.facts import Facts, Plan, Workload

__all__ = ["REGISTRY", "Effect", "Facts", "Plan", "Rule", "RuleInfo", "Source", "Workload", "info"]
