"""What rules read: the facts about a question (hardware, model, workload, packages); the plan a rule judges is
:class:`advisor.core.plan.Plan`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from advisor.core.plan import Plan, Workload
from probes.hardware import GPUInfo, HardwareProfile
from probes.model import ModelProfile

__all__ = ["Facts", "Plan", "Workload"]


class Facts(BaseModel):
    """Everything a rule may read."""

    hardware: HardwareProfile
    model: ModelProfile
    workload: Workload
    packages: dict[str, bool] = Field(
        default_factory=dict, description="optional packages found on this machine (bitsandbytes, deepspeed)"
    )

    @property
    def gpu(self) -> GPUInfo | None:
        return self.hardware.gpu

    @property
    def on_cpu(self) -> bool:
        return self.hardware.gpu is None
