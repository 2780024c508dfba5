"""Hardware probes: no driver, the catalog, and the NVML reading code driven by a stand-in binding."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from advisor.core.errors import UnknownGPUError
from probes.gpu_catalog import catalog, match_catalog, profile_from_catalog
from probes.hardware import derive_capabilities
from probes.nvml_probe import probe_local

REQUIRED = [
    "v100-16gb",
    "v100-32gb",
    "t4",
    "titan-rtx",
    "rtx-3090",
    "rtx-4090",
    "rtx-a6000",
    "a10g",
    "l4",
    "l40s",
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h100-pcie",
    "h200",
]


def test_no_driver_gives_zero_gpus_and_a_note() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    except pynvml.NVMLError:
        pass
    hw = probe_local()
    assert hw.source == "none" and hw.gpus == [] and hw.notes
    assert hw.host is not None and hw.host.cpu_cores >= 1 and hw.host.ram_bytes > 0


def test_catalog_has_the_required_gpus_with_sources() -> None:
    entries = catalog()
    for name in REQUIRED:
        e = entries[name]
        assert e.source_url.startswith("https://")
        assert e.memory_gib > 0 and e.memory_bandwidth_gbps > 0 and e.peak_tflops.fp32
        assert e.peak_tflops.fp16 or e.peak_tflops.bf16


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(UnknownGPUError, match="a100-80gb"):
        profile_from_catalog("b300")
    with pytest.raises(UnknownGPUError, match="count"):
        profile_from_catalog("t4:zero")


@pytest.mark.parametrize(
    "name, meant",
    [
        ("h100", "h100-sxm, h100-pcie"),
        ("4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("a100", "a100-40gb, a100-80gb, a100-40gb-pcie, a100-80gb-pcie"),
        ("a100-80g", "a100-80gb, a100-80gb-pcie"),
        ("h200-sxm", "h200"),
    ],
)
def test_a_near_gpu_name_is_answered_with_did_you_mean(name, meant) -> None:
    """Issue 45: --gpu h100 / 4090 / a100 got the whole catalog; now one line with the ids it may have meant."""
    with pytest.raises(UnknownGPUError) as err:
        profile_from_catalog(name)
    assert str(err.value) == f"unknown GPU '{name}'; did you mean {meant}?"


@pytest.mark.parametrize(
    "cc, bf16, tc, gen, align",
    [
        ("7.0", False, True, 1, 8),
        ("7.5", False, True, 2, 8),
        ("8.0", True, True, 3, 64),
        ("8.6", True, True, 3, 8),
        ("8.9", True, True, 4, 8),
        ("9.0", True, True, 4, 64),
        ("6.1", False, False, None, 8),
    ],
)
def test_capabilities_from_compute_capability(cc, bf16, tc, gen, align) -> None:
    caps = derive_capabilities(cc)
    assert caps["bf16"] is bf16 and caps["tf32"] is bf16  # never torch's emulation-counting answer
    assert caps["tensor_cores"] is tc and caps["tensor_core_generation"] == gen
    assert caps["alignment_multiple"] == align


def test_catalog_profile_with_count_and_links() -> None:
    hw = profile_from_catalog("a100-80gb:4", nodes=2)
    assert hw.num_gpus == 8 and len(hw.gpus) == 4 and hw.all_pairs_nvlink
    assert len(hw.links) == 6 and hw.links[0].label == "NV12"
    pcie = profile_from_catalog("rtx-4090:2")
    assert not pcie.all_pairs_nvlink and pcie.links[0].label == "?"


@pytest.mark.parametrize(
    "spec, nvlinked, ring, domain",
    [
        ("rtx-3090:4", {(0, 1), (2, 3)}, False, 2),  # GA102: 2-way NVLink bridge
        ("a100-80gb-pcie:8", {(0, 1), (2, 3), (4, 5), (6, 7)}, False, 2),  # PCIe A100: bridged pairs
        ("h100-pcie:4", {(0, 1), (2, 3)}, False, 2),
        ("rtx-4090:4", set(), False, 1),  # consumer Ada: no NVLink (and no peer-to-peer)
        ("h100-sxm:8", {(a, b) for a in range(8) for b in range(a + 1, 8)}, True, 8),  # NVSwitch
        (
            "v100-16gb:8",
            {(a, b) for a in range(8) for b in range(a + 1, 8) if a // 4 == b // 4 or b == a + 4},
            True,
            4,
        ),  # DGX-1 hybrid cube-mesh
    ],
)
def test_catalog_links_follow_the_board_type(spec, nvlinked, ring, domain) -> None:
    """`advisor probe --gpu rtx-3090:4` must not draw NVLink between every pair (issue 14)."""
    hw = profile_from_catalog(spec)
    assert {(link.a, link.b) for link in hw.links if link.nvlink_count} == nvlinked
    assert hw.nvlink_ring is ring and hw.nvlink_domain == domain
    assert hw.gpu.peer_to_peer is (not spec.startswith("rtx-4090"))
    assert any("links:" in note and "http" in note for note in hw.notes)  # the topology's source


def test_nics_per_node_default_by_network() -> None:
    """InfiniBand HGX / DGX nodes: one NIC per GPU; Ethernet: one NIC; --nics-per-node overrides."""
    from advisor.app.api import probe_hardware

    ib = probe_hardware("a100-80gb:8", nodes=2, interconnect="infiniband")
    assert ib.nics == 8 and ib.inter_node_bytes_per_s == 8 * 200e9 / 8
    eth = probe_hardware("a100-80gb:8", nodes=2, interconnect="ethernet")
    assert eth.nics == 1 and eth.inter_node_bytes_per_s == 100e9 / 8
    four = probe_hardware("a100-80gb:8", nodes=2, interconnect="ethernet", nics_per_node=4, inter_node_gbps=25)
    assert four.nics == 4 and four.inter_node_bytes_per_s == 4 * 25e9 / 8


def test_infiniband_runs_at_the_typical_servers_adapters_unless_a_speed_is_given() -> None:
    """A DGX H100 / H200 has one 400 Gb/s NDR adapter a GPU (the catalog's nic_gbit_s, with its source), a DGX A100
    200 Gb/s HDR (the network's catalog figure); --inter-node-gbps and Ethernet are not overridden by it."""
    from advisor.app.api import probe_hardware
    from probes.gpu_catalog import catalog

    assert catalog()["h100-sxm"].nic_gbit_s == 400 and "http" in catalog()["h100-sxm"].nic_source
    for said in (None, "infiniband"):
        h100 = probe_hardware("h100-sxm:8", nodes=2, interconnect=said)
        assert h100.network_gbit_s == 400 and h100.inter_node_bytes_per_s == 8 * 400e9 / 8
        assert h100.network_label == "InfiniBand NDR"
    a100 = probe_hardware("a100-80gb:8", nodes=2)
    assert a100.network_gbit_s == 200 and a100.network_label == "InfiniBand HDR"
    given = probe_hardware("h100-sxm:8", nodes=2, inter_node_gbps=200)
    assert given.network_gbit_s == 200 and given.network_label == "InfiniBand HDR"
    eth = probe_hardware("h200:8", nodes=2, interconnect="ethernet")
    assert eth.network_gbit_s == 100 and eth.network_label == "Ethernet"
    odd = probe_hardware("h100-sxm:8", nodes=2, inter_node_gbps=300)
    assert odd.network_label == "InfiniBand"


@pytest.mark.parametrize(
    "nvml_name, expected",
    [
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("Tesla V100-SXM2-16GB", "v100-16gb"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb-pcie"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
    ],
)
def test_nvml_names_match_the_catalog(nvml_name: str, expected: str) -> None:
    assert match_catalog(nvml_name).id == expected


class _NVMLError(Exception):
    pass


def _stand_in_nvml(temps=(45, 88)):
    """A stand-in for the pynvml module: two A100s joined by 12 NVLinks (for the reading code only)."""
    bus = ["0000:07:00.0", "0000:0F:00.0"]
    mem = SimpleNamespace(total=85899345920, free=80000000000, used=5899345920)

    def nvlink_state(h, link):
        if link >= 12:
            raise _NVMLError("not supported")
        return 1

    def not_supported(*_):
        raise _NVMLError("not supported")

    return SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-80GB",
        nvmlDeviceGetCudaComputeCapability=lambda h: (8, 0),
        nvmlDeviceGetMemoryInfo=lambda h: mem,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlSystemGetDriverVersion=lambda: "550.54",
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 4,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 4,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetPowerManagementLimit=lambda h: 400000,
        nvmlDeviceGetPowerManagementDefaultLimit=lambda h: 400000,
        nvmlDeviceGetTemperature=lambda h, kind: temps[h],
        NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetTemperatureThreshold=lambda h, kind: 87,
        NVML_TEMPERATURE_THRESHOLD_SLOWDOWN=1,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x40 if h else 0,
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=bus[h].encode()),
        NVML_NVLINK_MAX_LINKS=18,
        NVML_FEATURE_ENABLED=1,
        nvmlDeviceGetNvLinkState=nvlink_state,
        nvmlDeviceGetNvLinkRemotePciInfo=lambda h, link: SimpleNamespace(busId=bus[1 - h].encode()),
        nvmlDeviceGetTopologyCommonAncestor=not_supported,
    )


def test_nvml_reading_code() -> None:
    hw = probe_local(_stand_in_nvml())
    assert hw.source == "nvml" and len(hw.gpus) == 2
    g = hw.gpus[1]
    assert g.catalog_id == "a100-80gb" and g.bf16 and g.alignment_multiple == 64
    assert g.cuda_driver_version == "12.4" and g.power_limit_w == 400 and g.temperature_c == 88
    assert g.throttle_reasons == ["hw_thermal_slowdown"]
    assert hw.links[0].nvlink_count == 12 and hw.links[0].label == "NV12"


def test_nvml_failure_is_not_a_crash() -> None:
    def boom():
        raise _NVMLError("driver/library version mismatch")

    hw = probe_local(SimpleNamespace(nvmlInit=boom))
    assert hw.source == "none" and "mismatch" in hw.notes[0]
