"""Input pipeline: DataLoader pinned memory and workers."""

from __future__ import annotations

from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts


@register
class PinMemory(Rule):
    id = "input.pin-memory"
    title = "DataLoader(pin_memory=True) when training on a GPU"
    topic = "input"
    sources = [S.HF_DATALOADER, S.TORCH_PIN]
    rationale = "Pinned host memory makes host-to-GPU copies faster and asynchronous; it does nothing on the CPU."

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.on_cpu:
            return [
                self.set(Setting.DATALOADER_PIN_MEMORY, False, "training on the CPU: no host-to-GPU copies to speed up")
            ]
        return [self.set(Setting.DATALOADER_PIN_MEMORY, True, "faster, asynchronous host-to-GPU copies")]


@register
class NumWorkers(Rule):
    id = "input.num-workers"
    title = "DataLoader workers from the CPU count"
    topic = "input"
    sources = [S.HF_DATALOADER, S.TORCH_PIN]
    rationale = (
        "Loading in the main process can starve the GPU; the HF guide starts from num_workers=4 per "
        "training process, bounded by the cores each process has. On the CPU the workers would take "
        "cores from the computation itself."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        host = facts.hardware.host
        if facts.on_cpu:
            cores = host.cpu_cores if host else 1
            workers = 0 if cores <= 4 else min(2, cores // 8)
            return [
                self.set(
                    Setting.DATALOADER_NUM_WORKERS,
                    workers,
                    f"training on {cores} CPU cores: loader workers would compete with the computation",
                )
            ]
        gpus = max(len(facts.hardware.gpus), 1)
        if host is None:
            return [
                self.set(
                    Setting.DATALOADER_NUM_WORKERS,
                    4,
                    "host unknown (planning from the catalog): the documents' starting point, 4 per GPU process",
                )
            ]
        per_gpu = host.cpu_cores // gpus
        workers = max(1, min(4, per_gpu - 1))
        return [
            self.set(
                Setting.DATALOADER_NUM_WORKERS,
                workers,
                f"{host.cpu_cores} cores for {gpus} GPU process(es): {workers} workers each, one core left "
                "for the training loop",
            )
        ]
