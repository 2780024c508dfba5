"""How ``validate`` turns the flags it is given into the plan it runs: a micro-batch or an accumulation alone keeps the
global batch, and how a trial names a strategy it runs in another's place."""

from __future__ import annotations

from typing import Any

from probes.errors import UsageError
from probes.vocabulary import Parallelism


def split_batch(gbs: int, overrides: dict[str, Any]) -> dict[str, Any]:
    """A micro-batch alone keeps the global batch by changing the accumulation, and the other way round.

    Raises:
        UsageError: the given value does not divide the global batch, or micro-batch × accumulation is not it.
    """
    for given, derived in (("micro_batch_size", "gradient_accumulation_steps"),
                           ("gradient_accumulation_steps", "micro_batch_size")):
        if given in overrides and derived not in overrides:
            if gbs % overrides[given]:
                raise UsageError(f"--{given.replace('_', '-')} {overrides[given]} does not divide the global "
                                 f"batch {gbs}")
            return {**overrides, derived: gbs // overrides[given]}
    micro, steps = overrides.get("micro_batch_size"), overrides.get("gradient_accumulation_steps")
    if micro is not None and steps is not None and micro * steps != gbs:
        raise UsageError(f"--micro-batch-size {micro} × --gradient-accumulation-steps {steps} = {micro * steps} "
                         f"samples, not the global batch {gbs}: give two of the three, or three that agree")
    return overrides


def trial_label(parallelism: Parallelism) -> str:
    """How a trial runs a strategy: DeepSpeed's stages as their FSDP counterparts, DP as DDP."""
    if parallelism.deepspeed or parallelism.fsdp:
        fsdp = next(p for p in Parallelism if p.fsdp and p.stage == parallelism.stage)
        return f"FSDP {fsdp.spec.fsdp_strategy}"
    return parallelism.value.upper()
