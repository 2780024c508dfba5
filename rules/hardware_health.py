"""Hardware health from live NVML readings: heat, power caps, narrow PCIe links, throttling."""

from __future__ import annotations

from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts

THROTTLE_TEMPERATURE_C = 84.0  #: HF guide: "throttling down is likely to start at around 84-90C"


@register
class Temperature(Rule):
    id = "health.temperature"
    title = "GPU temperature near throttling"
    topic = "health"
    sources = [S.HF_POWER]
    rationale = "Under +80 °C is good and 70-75 °C excellent; throttling is likely from about 84-90 °C."

    def propose(self, facts: Facts) -> list[Effect]:
        return [
            self.warn(
                f"GPU {g.index} ({g.name}) is at {g.temperature_c:.0f} °C: throttling starts around "
                "84-90 °C; check cooling"
            )
            for g in facts.hardware.gpus
            if g.temperature_c is not None and g.temperature_c >= THROTTLE_TEMPERATURE_C
        ]


@register
class PowerCap(Rule):
    id = "health.power-cap"
    title = "power limit below the default"
    topic = "health"
    sources = [S.HF_POWER]
    rationale = "A GPU capped below its default power limit cannot reach its rated clocks."

    def propose(self, facts: Facts) -> list[Effect]:
        return [
            self.warn(
                f"GPU {g.index} ({g.name}) is capped at {g.power_limit_w:.0f} W of its default "
                f"{g.default_power_limit_w:.0f} W: expect lower throughput (nvidia-smi -pl)"
            )
            for g in facts.hardware.gpus
            if g.power_limit_w and g.default_power_limit_w and g.power_limit_w < 0.95 * g.default_power_limit_w
        ]


@register
class NarrowPcieLink(Rule):
    id = "health.pcie-link"
    title = "PCIe link narrower than the GPU supports"
    topic = "health"
    sources = [S.HF_CONNECTIVITY]
    rationale = (
        "A GPU running on fewer lanes than it supports (x8 instead of x16: wrong slot, riser) halves "
        "host-to-device and, without NVLink, GPU-to-GPU bandwidth. Idle GPUs lower the link generation "
        "to save power, so only the width is checked."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        return [
            self.warn(
                f"GPU {g.index} ({g.name}) runs its PCIe link at x{g.pcie_width} of x{g.pcie_max_width}: check the slot"
            )
            for g in facts.hardware.gpus
            if g.pcie_width and g.pcie_max_width and g.pcie_width < g.pcie_max_width
        ]


@register
class ThrottleReasons(Rule):
    id = "health.throttle-reasons"
    title = "active hardware or thermal throttling"
    topic = "health"
    sources = [S.HF_POWER, S.NVML_THROTTLE]
    rationale = "NVML reports why clocks are held down; hardware, thermal and power-brake slowdowns cost speed."

    def propose(self, facts: Facts) -> list[Effect]:
        bad = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
        return [
            self.warn(f"GPU {g.index} ({g.name}) is throttling: {', '.join(sorted(bad & set(g.throttle_reasons)))}")
            for g in facts.hardware.gpus
            if bad & set(g.throttle_reasons)
        ]
