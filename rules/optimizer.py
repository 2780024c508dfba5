"""Optimizer: AdamW by default, low-memory optimizers only when the states do not fit, fast kernels, the step in
backward."""

from __future__ import annotations

from advisor.core.vocabulary import Method, Offload, Optimizer, Parallelism, Penalty, Precision
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


@register
class AdamWDefault(Rule):
    id = "optimizer.adamw-default"
    title = "AdamW by default"
    topic = "optimizer"
    sources = [S.HF_ANATOMY, S.HF_ONE_ADAFACTOR]
    rationale = (
        "AdamW is the standard optimizer for transformers and converges reliably; it keeps two fp32 "
        "states (8 bytes per parameter)."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        return [
            self.prefer(
                Setting.OPTIMIZER, Optimizer.ADAMW, "the standard optimizer for transformers, reliable convergence"
            )
        ]


@register
class NoPlainSgd(Rule):
    id = "optimizer.no-sgd-for-transformers"
    title = "no plain SGD when planning transformer training"
    topic = "optimizer"
    sources = [S.HF_ONE_ADAFACTOR]
    rationale = (
        "Transformers are trained with Adam-type optimizers; SGD with momentum saves memory (4 B/param) "
        "but converges poorly on them. `advisor estimate --optimizer sgd` still estimates it."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        return [
            self.forbid(
                Setting.OPTIMIZER, Optimizer.SGD, "converges poorly on transformers; Adam-type optimizers are the norm"
            )
        ]


@register
class LowMemoryOptimizerWhenStatesDoNotFit(Rule):
    id = "optimizer.low-memory-when-states-do-not-fit"
    title = "8-bit Adam or Adafactor only when AdamW's states do not fit"
    topic = "optimizer"
    sources = [S.HF_ONE_8BIT, S.HF_ONE_ADAFACTOR, S.EIGHT_BIT_PAPER, S.ADAFACTOR_PAPER]
    rationale = (
        "8-bit Adam quantizes both states (2 B/param) and keeps Adam's behaviour; Adafactor stores only "
        "row and column statistics but can converge slower or worse than Adam. Use them when the "
        "optimizer states are what does not fit."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        why = "quantized states (2 B/param, needs bitsandbytes): only when AdamW's 8 B/param do not fit"
        return [
            self.fallback(Setting.OPTIMIZER, Optimizer.ADAMW_8BIT, why, penalty=Penalty.MUCH_SLOWER),
            self.fallback(Setting.OPTIMIZER, Optimizer.PAGED_ADAMW_8BIT, why, penalty=Penalty.MUCH_SLOWER),
            self.fallback(
                Setting.OPTIMIZER,
                Optimizer.ADAFACTOR,
                "factored states, but convergence can be slower or worse than Adam: only when neither "
                "AdamW nor 8-bit Adam fits",
                penalty=Penalty.RISKY,
                quality_risk=True,
            ),
        ]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        effects = []
        if plan.optimizer == Optimizer.ADAFACTOR:
            effects.append(
                self.warn(
                    "Adafactor's factored states can converge slower or worse than AdamW's: "
                    "compare the loss curve on a short run",
                    setting=Setting.OPTIMIZER,
                )
            )
        if Optimizer.of(plan.optimizer).spec.package and facts.packages.get("bitsandbytes") is False:
            effects.append(
                self.warn(
                    f"{plan.optimizer} needs the bitsandbytes package, which is not installed here: "
                    "pip install bitsandbytes",
                    setting=Setting.OPTIMIZER,
                )
            )
        return effects


@register
class FusedOptimizer(Rule):
    id = "optimizer.fused-implementation"
    title = "fused or multi-tensor (foreach) optimizer kernels"
    topic = "optimizer"
    sources = [S.HF_FASTER_OPT, S.TORCH_ADAMW]
    rationale = (
        "The per-parameter for-loop launches a kernel per tensor; the multi-tensor (foreach) and fused "
        "implementations update all parameters in a few kernels. Fused AdamW also avoids foreach's "
        "temporary copy of the parameters."
    )

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


@register
class BitsandbytesUnderFsdp2(Rule):
    id = "optimizer.bitsandbytes-fsdp2"
    title = "under FSDP2, torchao's 8-bit AdamW in bitsandbytes' place"
    topic = "optimizer"
    sources = [S.BNB_FSDP2_ISSUE, S.BNB_FSDP_ISSUE, S.TORCHAO_OPTIM, S.HF_TORCHAO_OPTIM]
    rationale = (
        "bitsandbytes' optimizers hand each parameter to their CUDA kernels as a plain tensor; FSDP2 "
        "(fully_shard) makes every parameter a DTensor, and their first step fails (illegal memory access, "
        "bitsandbytes issues 1633 and 89, open). torchao's AdamW8bit keeps the same 8-bit block-wise states "
        "(2 B/param, 256-element blocks) of each DTensor's local shard, and the Trainer builds it with "
        "optim='adamw_torch_8bit' (torchao >= 0.4): the emitted files run it under FSDP2, and torch's fused "
        "AdamW in place of bitsandbytes' paged 32-bit AdamW. FSDP1's flat parameters and DeepSpeed's "
        "partitions are plain tensors: bitsandbytes runs there."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        spec = Optimizer.of(plan.optimizer).spec
        if not (spec.trainer_optim_dtensor and Parallelism.of(plan.parallelism).fsdp and plan.runs_fsdp2):
            return []
        why = (
            f"bitsandbytes' {plan.optimizer} fails on FSDP2's DTensor parameters (bitsandbytes issues 1633, 89): "
            f"the emitted files run optim='{spec.trainer_optim_dtensor}' ({spec.dtensor_implementation}, the same "
            "states)"
        )
        effects = [self.set(Setting.OPTIMIZER_IMPLEMENTATION, spec.dtensor_implementation, why)]
        if facts.packages.get(spec.dtensor_implementation) is False:  # torchao (a package), not torch's fused AdamW
            effects.append(
                self.warn(
                    f"{why}, which needs {spec.dtensor_implementation}: pip install {spec.dtensor_implementation}",
                    setting=Setting.OPTIMIZER,
                )
            )
        return effects


@register
class OptimizerInBackward(Rule):
    id = "optimizer.step-in-backward"
    title = "the optimizer step fused into backward when the gradients do not fit (one GPU or FSDP; no accumulation)"
    topic = "optimizer"
    sources = [S.TORCH_OPT_IN_BWD, S.TORCHTUNE_OPT_IN_BWD]
    rationale = (
        "With a post-accumulate-grad hook on every parameter the optimizer steps each parameter as soon as "
        "its gradient is ready and frees the gradient, so no full set of gradients is ever held (about "
        "one layer's): it saves the gradients' bytes at no cost in speed. The step happens inside "
        "backward, so gradients cannot accumulate over micro-batches and cannot be clipped by their "
        "global norm (which needs every gradient first), nor skipped by fp16's loss scaler. torchtune runs "
        "it on one GPU and with FSDP (optimizer_in_bwd: True); DDP's bucketed all-reduce and DeepSpeed's "
        "engine own the step, and the HF Trainer has no such option."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        return [
            self.fallback(
                Setting.OPTIMIZER_IN_BACKWARD,
                True,
                "steps each parameter in backward and frees its "
                "gradient: no gradient accumulation and no clipping by global norm, so only when the "
                "gradients are what does not fit",
                penalty=Penalty.MUCH_SLOWER,
                quality_risk=True,
            )
        ]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not plan.optimizer_in_backward:
            return []
        return [
            self.warn(
                "optimizer step in backward: no gradient accumulation and no gradient clipping by global "
                "norm (set torchtune's clip_grad_norm: null); the HF Trainer has no such option: use "
                "torchtune (optimizer_in_bwd: True) or register_post_accumulate_grad_hook in your own "
                "loop",
                setting=Setting.OPTIMIZER_IN_BACKWARD,
            )
        ]

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if not plan.optimizer_in_backward:
            return None
        parallelism = Parallelism.of(plan.parallelism)
        why = None
        if plan.gradient_accumulation_steps > 1:
            why = (
                f"the step runs inside each backward: {plan.gradient_accumulation_steps} accumulation steps "
                "cannot accumulate gradients; use accumulation 1"
            )
        elif parallelism.replicated or parallelism.deepspeed:
            why = f"{plan.parallelism} owns the gradient sync and the step: only on one device or with FSDP"
        elif Method.of(plan.method).spec.adapters:
            why = "the adapters' gradients are a few MB: there is nothing to save (torchtune: full fine-tuning only)"
        elif plan.offload != Offload.NONE:
            why = "with offload the optimizer step runs on the CPU already"
        elif plan.precision == Precision.FP16:
            why = (
                "fp16's GradScaler checks every gradient for inf / NaN before it lets the step run; a step taken "
                "in backward cannot be skipped: use bf16"
            )
        return self.forbid(Setting.OPTIMIZER_IN_BACKWARD, True, why, hard=True) if why else None
