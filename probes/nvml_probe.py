"""Read this machine's GPUs through NVML (the nvidia-ml-py package, module ``pynvml``).

No NVIDIA driver (``NVMLError_LibraryNotFound``) or any other NVML failure gives a valid
profile with zero GPUs and a note: never a crash. Each optional reading that a GPU does not
support (``NVMLError_NotSupported`` and friends) is left ``None``.

Sources: NVML API reference, https://docs.nvidia.com/deploy/nvml-api/ (Device Queries,
"nvmlDeviceGetTopologyCommonAncestor", "NvLink Methods", "nvmlClocksEventReasons").
"""

from __future__ import annotations

from typing import Any, Callable

from probes.gpu_catalog import match_catalog
from probes.hardware import GPUInfo, GPULink, HardwareProfile, derive_capabilities, read_host
from probes.nvml_memory import bus_id, process_used_bytes  # noqa: F401 (this probe's API)

#: NVML clock throttle (event) reason bits: nvml.h, "nvmlClocksEventReasons".
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}

#: nvmlGpuTopologyLevel_t → the label ``nvidia-smi topo -m`` prints.
TOPOLOGY_LABELS = {0: "SAME_BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _opt(fn: Callable[..., Any], *args: Any) -> Any:
    """Call an NVML query; ``None`` when the GPU or driver does not support it."""
    try:
        return fn(*args)
    except Exception:  # pynvml raises a zoo of NVMLError subclasses; all mean "not available"
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_gpu(nvml: Any, index: int, handle: Any) -> GPUInfo:
    name = _text(nvml.nvmlDeviceGetName(handle)) or f"GPU {index}"
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    cc = f"{major}.{minor}"
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    entry = match_catalog(name)
    cuda = _opt(nvml.nvmlSystemGetCudaDriverVersion)
    power = _opt(nvml.nvmlDeviceGetPowerManagementLimit, handle)
    default_power = _opt(nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"
    )
    bits = _opt(reasons_fn, handle) or 0
    return GPUInfo(
        index=index,
        name=name,
        catalog_id=entry.id if entry else None,
        uuid=_text(_opt(nvml.nvmlDeviceGetUUID, handle)),
        compute_capability=cc,
        memory_total_bytes=int(mem.total),
        memory_free_bytes=int(mem.free),
        driver_version=_text(_opt(nvml.nvmlSystemGetDriverVersion)),
        cuda_driver_version=f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else None,
        pcie_generation=_opt(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_max_generation=_opt(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_width=_opt(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        pcie_max_width=_opt(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        power_limit_w=power / 1000 if power else None,
        default_power_limit_w=default_power / 1000 if default_power else None,
        temperature_c=_opt(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        slowdown_temperature_c=_opt(
            nvml.nvmlDeviceGetTemperatureThreshold, handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        throttle_reasons=[label for bit, label in THROTTLE_REASONS.items() if bits & bit],
        peak_tflops=entry.peak_tflops if entry else None,
        memory_bandwidth_gbps=entry.memory_bandwidth_gbps if entry else None,
        nvlink_bandwidth_gbps=entry.nvlink_bandwidth_gbps if entry else None,
        peer_to_peer=entry.peer_to_peer if entry else True,
        source_url=entry.source_url if entry else None,
        **derive_capabilities(cc, entry.id if entry else None),
    )


def _nvlink_peers(nvml: Any, handle: Any) -> list[str]:
    """PCI bus ids at the far end of each active NVLink of a GPU."""
    peers = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _opt(nvml.nvmlDeviceGetNvLinkState, handle, link)
        if state != getattr(nvml, "NVML_FEATURE_ENABLED", 1):
            continue
        info = _opt(nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        if info is not None:
            peers.append(_text(info.busId).lower())
    return peers


def _read_links(nvml: Any, handles: list[Any]) -> list[GPULink]:
    bus_ids = [
        (_text(_opt(nvml.nvmlDeviceGetPciInfo, h).busId) or "").lower() if _opt(nvml.nvmlDeviceGetPciInfo, h) else ""
        for h in handles
    ]
    peers = [_nvlink_peers(nvml, h) for h in handles]
    links = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            count = sum(1 for p in peers[i] if bus_ids[j] and p == bus_ids[j])
            relation = None
            if not count:
                level = _opt(nvml.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j])
                relation = TOPOLOGY_LABELS.get(level) if level is not None else None
            links.append(GPULink(a=i, b=j, nvlink_count=count, pcie_relation=relation))
    return links


def probe_local(nvml: Any = None) -> HardwareProfile:
    """Probe this machine: host facts and every GPU NVML sees.

    Args:
        nvml: the NVML binding (``pynvml``); injectable so tests can drive this code without a GPU.
    Returns:
        A profile with ``source='nvml'``, or ``source='none'`` with zero GPUs and a note when
        there is no driver or NVML fails. Never raises.
    """
    host = read_host()
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return HardwareProfile(
                source="none", host=host, notes=["nvidia-ml-py is not installed: no GPU could be probed"]
            )
    try:
        nvml.nvmlInit()
    except Exception as exc:
        why = (
            "no NVIDIA driver found (NVML library not found)"
            if type(exc).__name__ == "NVMLError_LibraryNotFound"
            else f"NVML failed: {exc}"
        )
        return HardwareProfile(source="none", host=host, notes=[why])
    try:
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = [_read_gpu(nvml, i, h) for i, h in enumerate(handles)]
        links = _read_links(nvml, handles) if count > 1 else []
    except Exception as exc:
        return HardwareProfile(source="none", host=host, notes=[f"NVML failed while reading GPUs: {exc}"])
    finally:
        _opt(nvml.nvmlShutdown)
    notes = []
    if not gpus:
        notes.append("the NVIDIA driver is present but reports no GPU")
    if len({g.name for g in gpus}) > 1:
        notes.append(
            "mixed GPU models on one host: advisor plans for the first: " + ", ".join(sorted({g.name for g in gpus}))
        )
    for g in gpus:
        if g.catalog_id is None:
            notes.append(
                f"GPU {g.index} '{g.name}' is not in the catalog: no datasheet peak rates, "
                "speed estimates use its compute capability only"
            )
    return HardwareProfile(source="nvml" if gpus else "none", host=host, gpus=gpus, links=links, notes=notes)
