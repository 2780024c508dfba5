"""torch.compile: priced in the plan (Inductor's fusions keep fewer tensors and move fewer bytes)."""

from __future__ import annotations

from advisor.core.vocabulary import Method, Parallelism
from probes.adapters import adapts_experts
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan
from rules.stack import pinned


@register
class CompileLongRuns(Rule):
    id = "compile.long-runs"
    title = "torch.compile for GPU runs, except under DeepSpeed"
    topic = "compile"
    sources = [
        S.HF_ONE_COMPILE,
        S.TORCH_COMPILE,
        S.TRITON_CC,
        S.PT2_PAPER,
        S.HF_DEEPSPEED_COMPILE,
        S.PEFT_TARGET_PARAMETERS,
    ]
    rationale = (
        "torch.compile fuses elementwise kernels and recomputes cheap pointwise ops in the backward "
        "instead of saving them (AOTAutograd's min-cut partitioner), so a step moves fewer bytes and keeps "
        "fewer activations (the PyTorch 2 paper: 1.41x training speed-up over 180+ models on A100; the "
        "seeds report DistilBert training 2x faster). Compilation costs minutes up front and not every "
        "model compiles, so it pays on long runs. Its GPU backend (Triton) needs compute capability 7.0 or "
        "newer; the Trainer does not compile a DeepSpeed engine (transformers issue 23095); PEFT's LoRA on a "
        "mixture of experts' 3-D expert parameters (target_parameters) re-parametrizes them every step, which "
        "PEFT expects to recompile or break the graph, and advises against compiling it."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        asked = pinned(self, facts, Setting.TORCH_COMPILE)
        gpu = facts.gpu
        if gpu is None:
            return asked or [
                self.forbid(
                    Setting.TORCH_COMPILE, True, "CPU training: compile time dominates short runs; try it for long ones"
                )
            ]
        if gpu.cc < (7, 0):
            return [
                self.forbid(
                    Setting.TORCH_COMPILE,
                    True,
                    f"compute capability {gpu.compute_capability} is below Triton's 7.0",
                    hard=True,
                )
            ]
        return asked or []

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if plan.torch_compile and Parallelism.of(plan.parallelism).spec.framework == "deepspeed":
            return self.forbid(
                Setting.TORCH_COMPILE,
                True,
                "the Trainer does not compile a DeepSpeed engine (transformers issue 23095)",
                hard=True,
            )
        if (
            plan.torch_compile
            and Method.of(plan.method).spec.adapters
            and adapts_experts(facts.model, plan.lora_targets)
        ):
            return self.forbid(
                Setting.TORCH_COMPILE,
                True,
                "LoRA on the routed experts (PEFT target_parameters): "
                "PEFT expects recompilation and graph breaks with "
                "torch.compile and advises against both at once",
                hard=True,
            )
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not plan.torch_compile:
            return []
        return [
            self.set(
                Setting.TORCH_COMPILE,
                True,
                "fused kernels: fewer saved activations and fewer bytes moved; the compile time pays back on long runs",
            ),
            self.warn(
                "torch.compile adds minutes of compilation at start and not every model compiles: "
                "turn it off for short runs or if compilation fails",
                setting=Setting.TORCH_COMPILE,
            ),
        ]
