"""The device memory NVML shows in use by this process: what the CUDA context's measurement and the trials read
beside torch's allocator (a leaf of probes: NVML itself is imported inside the function)."""

from __future__ import annotations

import os
from typing import Any


def bus_id(props: Any) -> str:
    """NVML's PCI bus id ('00000000:3b:00.0') of a GPU from ``torch.cuda.get_device_properties``."""
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def process_used_bytes(bus: str, nvml: Any = None) -> int | None:
    """Device memory NVML shows in use by this process on the GPU at PCI bus id ``bus`` ('00000000:3b:00.0'), bytes;
    the whole GPU's used memory when per-process figures are hidden (containers); None when NVML cannot say.

    Args:
        nvml: the NVML binding (``pynvml``); injectable so tests can drive this code without a GPU.
    Never raises."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        try:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(bus)
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == os.getpid() and proc.usedGpuMemory:
                    return int(proc.usedGpuMemory)
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:  # a failed shutdown changes no reading
                pass
    except Exception:  # NVML missing, old driver, no permission
        return None
