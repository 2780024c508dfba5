"""torch.compile for long runs."""

from __future__ import annotations

from probes.vocabulary import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts


@register
class CompileLongRuns(Rule):
    id = "compile.long-runs"
    title = "torch.compile for long GPU runs"
    topic = "compile"
    sources = [S.HF_ONE_COMPILE, S.TORCH_COMPILE, S.TRITON_CC]
    rationale = ("torch.compile fuses kernels (the seeds report DistilBert training 2x faster); compilation costs "
                 "minutes up front and not every model compiles, so it pays on long runs. Its GPU backend "
                 "(Triton) needs compute capability 7.0 or newer.")

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is None:
            return [self.set(Setting.TORCH_COMPILE, False, "CPU training: compile time dominates short runs; try it for "
                                                     "long ones")]
        if gpu.cc < (7, 0):
            return [self.set(Setting.TORCH_COMPILE, False,
                             f"compute capability {gpu.compute_capability} is below Triton's 7.0")]
        return [self.set(Setting.TORCH_COMPILE, True, "fused kernels pay back the compile time on long runs"),
                self.warn("torch.compile adds minutes of compilation at start and not every model compiles: "
                          "turn it off for short runs or if compilation fails", setting=Setting.TORCH_COMPILE)]
