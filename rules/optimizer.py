"""Optimizer: AdamW by default, low-memory optimizers only when the states do not fit, fast kernels."""

from __future__ import annotations

from probes.vocabulary import Optimizer, Penalty, Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


@register
class AdamWDefault(Rule):
    id = "optimizer.adamw-default"
    title = "AdamW by default"
    topic = "optimizer"
    sources = [S.HF_ANATOMY, S.HF_ONE_ADAFACTOR]
    rationale = ("AdamW is the standard optimizer for transformers and converges reliably; it keeps two fp32 "
                 "states (8 bytes per parameter).")

    def propose(self, facts: Facts) -> list[Effect]:
        return [self.prefer(Setting.OPTIMIZER, Optimizer.ADAMW, "the standard optimizer for transformers, reliable convergence")]


@register
class NoPlainSgd(Rule):
    id = "optimizer.no-sgd-for-transformers"
    title = "no plain SGD when planning transformer training"
    topic = "optimizer"
    sources = [S.HF_ONE_ADAFACTOR]
    rationale = ("Transformers are trained with Adam-type optimizers; SGD with momentum saves memory (4 B/param) "
                 "but converges poorly on them. `advisor estimate --optimizer sgd` still estimates it.")

    def propose(self, facts: Facts) -> list[Effect]:
        return [self.forbid(Setting.OPTIMIZER, Optimizer.SGD,
                            "converges poorly on transformers; Adam-type optimizers are the norm")]


@register
class LowMemoryOptimizerWhenStatesDoNotFit(Rule):
    id = "optimizer.low-memory-when-states-do-not-fit"
    title = "8-bit Adam or Adafactor only when AdamW's states do not fit"
    topic = "optimizer"
    sources = [S.HF_ONE_8BIT, S.HF_ONE_ADAFACTOR, S.EIGHT_BIT_PAPER, S.ADAFACTOR_PAPER]
    rationale = ("8-bit Adam quantizes both states (2 B/param) and keeps Adam's behaviour; Adafactor stores only "
                 "row and column statistics but can converge slower or worse than Adam. Use them when the "
                 "optimizer states are what does not fit.")

    def propose(self, facts: Facts) -> list[Effect]:
        why = "quantized states (2 B/param, needs bitsandbytes): only when AdamW's 8 B/param do not fit"
        return [
            self.fallback(Setting.OPTIMIZER, Optimizer.ADAMW_8BIT, why, penalty=Penalty.MUCH_SLOWER),
            self.fallback(Setting.OPTIMIZER, Optimizer.PAGED_ADAMW_8BIT, why, penalty=Penalty.MUCH_SLOWER),
            self.fallback(Setting.OPTIMIZER, Optimizer.ADAFACTOR,
                          "factored states, but convergence can be slower or worse than Adam: only when neither "
                          "AdamW nor 8-bit Adam fits", penalty=Penalty.RISKY),
        ]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        effects = []
        if plan.optimizer == Optimizer.ADAFACTOR:
            effects.append(self.warn("Adafactor was needed to fit: its convergence can be slower or worse than "
                                     "AdamW's, so compare the loss curve on a short run", setting=Setting.OPTIMIZER))
        if Optimizer.of(plan.optimizer).spec.package and facts.packages.get("bitsandbytes") is False:
            effects.append(self.warn(f"{plan.optimizer} needs the bitsandbytes package, which is not installed here: "
                                     "pip install bitsandbytes", setting=Setting.OPTIMIZER))
        return effects


@register
class FusedOptimizer(Rule):
    id = "optimizer.fused-implementation"
    title = "fused or multi-tensor (foreach) optimizer kernels"
    topic = "optimizer"
    sources = [S.HF_FASTER_OPT, S.TORCH_ADAMW]
    rationale = ("The per-parameter for-loop launches a kernel per tensor; the multi-tensor (foreach) and fused "
                 "implementations update all parameters in a few kernels. Fused AdamW also avoids foreach's "
                 "temporary copy of the parameters.")

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        optimizer = Optimizer.of(plan.optimizer)
        spec, impl = optimizer.spec, optimizer.implementation(plan.device)
        module, cls = spec.factory.split(":")
        if impl == "fused":
            why = f"{module}.{cls}(fused=True) (Trainer optim='{spec.trainer_optim_fused}'): one kernel, no foreach temporaries"
        elif spec.trainer_optim_fused:
            why = f"multi-tensor {cls} on the CPU"
        else:
            why = f"the {impl} implementation of {plan.optimizer}"
        return [self.set(Setting.OPTIMIZER_IMPLEMENTATION, impl, why)]
