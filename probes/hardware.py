"""Hardware facts: the typed profile every other layer reads.

``HardwareProfile`` is built either from live NVML readings (:mod:`probes.nvml_probe`) or from
the shipped datasheet catalog (:mod:`probes.gpu_catalog`) when the user plans for a GPU they do
not have. Derived capabilities (tensor cores, bf16, tf32, alignment) come from the compute
capability, never from ``torch.cuda.is_bf16_supported()``, which answers True on V100 and T4
because it counts emulation.

Sources:
- Compute capabilities and tensor-core generations: CUDA C++ Programming Guide, "Compute
  Capabilities" https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#compute-capabilities
- bf16 / tf32 from Ampere (cc 8.0) on: NVIDIA A100 Tensor Core GPU Architecture whitepaper,
  https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf
  ("Third-generation Tensor Cores"); the HF performance guide, section "bf16"/"tf32":
  https://huggingface.co/docs/transformers/v4.18.0/en/performance#bf16
- Alignment multiples: NVIDIA "Matrix Multiplication Background User's Guide", section
  "Tensor Core Requirements"
  https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html#requirements-tc
  (8 fp16/bf16 elements; 64 elements on A100 for the best cuBLAS efficiency, as the HF guide
  "Batch sizes" section quotes).
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from probes.packages import installed_packages
from probes.topology import largest_clique
from probes.cuda_stack import ModuleLoading, default_context_bytes, lazy_loading, module_loading_env, torch_build
from advisor.core.units import gbit_to_bytes_per_s
from advisor.core.vocabulary import DEFAULT_NETWORK, INFINIBAND_GENERATIONS, Network, literal

#: Tensor-core generation by compute-capability major.minor (CUDA programming guide; NVIDIA
#: architecture whitepapers: Volta 1st, Turing 2nd, Ampere 3rd, Ada and Hopper 4th, Blackwell 5th).
_TENSOR_CORE_GENERATION = {(7, 0): 1, (7, 2): 1, (7, 5): 2, (8, 0): 3, (8, 6): 3, (8, 7): 3,
                           (8, 9): 4, (9, 0): 4, (10, 0): 5, (12, 0): 5}


class PeakTflops(BaseModel):
    """Dense peak rates in TFLOP/s (10^12 FLOP/s) by math mode; ``None`` where the GPU lacks it."""

    fp32: float | None = Field(None, description="FP32 on CUDA cores, TFLOP/s")
    tf32: float | None = Field(None, description="TF32 tensor cores, TFLOP/s (Ampere and newer)")
    fp16: float | None = Field(None, description="FP16 tensor cores with FP32 accumulate, TFLOP/s")
    bf16: float | None = Field(None, description="BF16 tensor cores with FP32 accumulate, TFLOP/s")


class GPUInfo(BaseModel):
    """One GPU: live NVML readings where probed, datasheet facts where known."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    index: int = Field(description="device index as NVML numbers it")
    name: str = Field(description="marketing name, e.g. 'NVIDIA A100-SXM4-80GB'")
    catalog_id: str | None = Field(None, description="matching entry of the GPU catalog, e.g. 'a100-80gb'")
    uuid: str | None = None
    """NVML's GPU UUID (live probe only)"""
    compute_capability: str = Field(description="CUDA compute capability 'major.minor', e.g. '8.0'")
    memory_total_bytes: int = Field(description="device memory, bytes")
    memory_free_bytes: int | None = Field(None, description="free device memory now, bytes (live probe only)")
    driver_version: str | None = None
    """NVIDIA driver version, e.g. '550.54.15' (live probe only)"""
    cuda_driver_version: str | None = Field(None, description="highest CUDA version the driver supports, e.g. '12.4'")
    pcie_generation: int | None = Field(None, description="current PCIe link generation")
    pcie_max_generation: int | None = Field(None, description="maximum PCIe link generation of the GPU")
    pcie_width: int | None = Field(None, description="current PCIe link width (lanes)")
    pcie_max_width: int | None = Field(None, description="maximum PCIe link width (lanes)")
    power_limit_w: float | None = Field(None, description="enforced power limit, W")
    default_power_limit_w: float | None = Field(None, description="default power limit, W")
    temperature_c: float | None = Field(None, description="GPU core temperature, °C")
    slowdown_temperature_c: float | None = Field(None, description="temperature at which the GPU slows down, °C")
    throttle_reasons: list[str] = Field(default_factory=list, description="active clock throttle reasons")
    tensor_cores: bool = Field(description="has tensor cores (compute capability >= 7.0)")
    tensor_core_generation: int | None = Field(None, description="tensor-core generation (1 Volta ... 5 Blackwell)")
    bf16: bool = Field(description="native bf16 math (compute capability >= 8.0; not emulation)")
    tf32: bool = Field(description="tf32 tensor-core math (compute capability >= 8.0)")
    alignment_multiple: int = Field(description="tensor-core alignment multiple for fp16/bf16 GEMM dimensions, elements")
    peak_tflops: PeakTflops | None = Field(None, description="datasheet peak rates; None for a GPU not in the catalog")
    memory_bandwidth_gbps: float | None = Field(None, description="device memory bandwidth, GB/s")
    nvlink_bandwidth_gbps: float | None = Field(None, description="total NVLink bandwidth per GPU, GB/s")
    peer_to_peer: bool = Field(True, description="PCIe peer-to-peer transfers between GPUs work (False: they go "
                                                 "through host memory, as on GeForce RTX 4090 cards)")
    source_url: str | None = Field(None, description="where the datasheet figures come from")

    @property
    def cc(self) -> tuple[int, int]:
        """Compute capability as a ``(major, minor)`` tuple."""
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @property
    def fp8(self) -> bool:
        """fp8 tensor cores (Ada 8.9, Hopper 9.0 and newer), dense at twice the 16-bit rate (NVIDIA H100 Tensor Core
        GPU Architecture whitepaper, "FP8", https://resources.nvidia.com/en-us-tensor-core; Ada Lovelace
        architecture whitepaper, "Fourth-Gen Tensor Cores")."""
        return self.cc >= (8, 9)


class GPULink(BaseModel):
    """How two GPUs of one host are connected, as ``nvidia-smi topo -m`` shows it."""

    a: int = Field(description="index of the first GPU")
    b: int = Field(description="index of the second GPU")
    nvlink_count: int = Field(0, description="number of NVLinks between the two (NV# in nvidia-smi topo -m)")
    pcie_relation: Literal["PIX", "PXB", "PHB", "NODE", "SYS", "SAME_BOARD"] | None = Field(
        None, description="PCIe relation when there is no NVLink; None when unknown (catalog plans)")

    @property
    def label(self) -> str:
        """The ``nvidia-smi topo -m`` label: 'NV12', 'PHB', … or '?' when unknown."""
        if self.nvlink_count:
            return f"NV{self.nvlink_count}"
        return self.pcie_relation or "?"


class HostInfo(BaseModel):
    """The host: CPU cores and RAM."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    cpu_cores: int = Field(description="logical CPU cores available to this process")
    ram_bytes: int = Field(description="total RAM, bytes")
    cpu_model: str | None = None
    """CPU model name from /proc/cpuinfo"""
    cpu_flags: list[str] = Field(default_factory=list, description="CPU SIMD flags that matter for CPU training")
    cpu_mhz: float | None = Field(None, description="nominal CPU clock, MHz")
    packages: dict[str, str | None] = Field(default_factory=dict, description="optional training packages by import "
                                            "name (flash_attn, liger_kernel, ...): installed version, or None when "
                                            "absent (:func:`probes.packages.installed_packages`)")
    torch_version: str | None = Field(None, description="the installed torch's release, e.g. '2.5.1+cu121'; None "
                                                        "without torch")
    torch_cuda_version: str | None = Field(None, description="the CUDA runtime the installed torch was built with "
                                                             "(torch.version.cuda), e.g. '12.1'; None for a CPU build")
    cuda_module_loading: str | None = Field(None, description="CUDA_MODULE_LOADING as this process's environment "
                                                              "sets it (LAZY, EAGER, DEFAULT); None when unset")


#: The :class:`HardwareProfile` fields a person gives (command-line options) rather than the probe or the catalog
#: reads from the GPUs: they describe the site and the software stack, so they hold on other GPUs of the same site.
GIVEN_SETTINGS = ("interconnect", "inter_node_gbit_s", "nics_per_node", "host_memory_bytes", "cuda_context_bytes",
                  "cuda_version")


class HardwareProfile(BaseModel):
    """Everything advisor knows about the hardware to plan for."""

    source: Literal["nvml", "catalog", "none"] = Field(
        description="'nvml': read from this machine; 'catalog': planned from datasheets; 'none': no GPU found")
    host: HostInfo | None = Field(None, description="this machine's host; None when planning for catalog hardware")
    gpus: list[GPUInfo] = Field(default_factory=list, description="GPUs of one node")
    links: list[GPULink] = Field(default_factory=list, description="link between every pair of GPUs of the node")
    nodes: int = Field(1, description="number of identical nodes")
    interconnect: literal(Network) | None = Field(
        None, description="the network between nodes (None: one node, or not said: InfiniBand assumed, at the typical "
                          "server's adapters: typical_nic_gbit_s, else HDR)")
    inter_node_gbit_s: float | None = Field(
        None, description="network bandwidth between nodes, per NIC and direction, Gb/s (gigabits)")
    nics_per_node: int | None = Field(
        None, ge=1, description="network adapters (NICs) per node, as given (--nics-per-node); None: 1 on Ethernet, "
                                "one per GPU on InfiniBand (HGX / DGX-class nodes)")
    notes: list[str] = Field(default_factory=list, description="what the probe could not read, and why")
    host_memory_bytes: int | None = Field(None, description="RAM of one node for offloaded states, bytes, as given "
                                                            "(--host-memory); None: the probed host's RAM")
    typical_host_memory_bytes: int | None = Field(
        None, description="RAM of one node of the catalog's typical server for these GPUs, bytes (the server's RAM per "
                          "GPU times the GPUs of a node: probes/data/gpus.json host_memory_gib_per_gpu): what offload "
                          "is checked against without --host-memory; None: not planned from the catalog")
    typical_host_source: str | None = Field(None, description="the server typical_host_memory_bytes is from, with its "
                                                              "URL")
    typical_nic_gbit_s: float | None = Field(
        None, description="the InfiniBand adapters of the catalog's typical server for these GPUs, Gb/s per NIC "
                          "(probes/data/gpus.json nic_gbit_s: DGX H100 / H200's 400 Gb/s ConnectX-7): what InfiniBand "
                          "is priced at without --inter-node-gbps; None: not planned from the catalog, or no such "
                          "server (HDR's 200 Gb/s)")
    cuda_context_bytes: int | None = Field(None, description="device memory the CUDA context and library workspaces "
                                                             "take, bytes, as given (--cuda-context) or measured "
                                                             "(probe --measure-context); None: by module loading "
                                                             "(:attr:`context_bytes`)")
    cuda_version: str | None = Field(None, description="the CUDA runtime the training process uses, as given "
                                                       "(--cuda-version, e.g. 11.8); None: the local torch build's, "
                                                       "or for catalog GPUs a current one (12.2 or newer)")

    def with_settings_of(self, other: HardwareProfile) -> HardwareProfile:
        """This profile with the settings ``other`` was given rather than read from its GPUs (:data:`GIVEN_SETTINGS`:
        the network between nodes, host RAM, the CUDA context and version), where ``other`` has them: the same
        training stack on other GPUs, as the "would fit" and "consider" suggestions re-plan it."""
        update = {name: getattr(other, name) for name in GIVEN_SETTINGS if getattr(other, name) is not None}
        return self.model_copy(update=update) if update else self

    @property
    def module_loading(self) -> ModuleLoading:
        """Whether CUDA loads the training process's kernels lazily, and why (:func:`probes.cuda_stack.lazy_loading`
        of ``cuda_version`` or the local torch build's, the local torch release, ``CUDA_MODULE_LOADING`` and the
        GPU's driver; catalog GPUs: the CUDA version given, else a current stack)."""
        host = None if self.source == "catalog" else self.host
        return lazy_loading(self.cuda_version or (host.torch_cuda_version if host else None),
                            host.torch_version if host else None, host.cuda_module_loading if host else None,
                            self.gpu.driver_version if self.gpu else None)

    @property
    def context_bytes(self) -> int:
        """Device memory the CUDA context, loaded kernels and library workspaces take on each GPU, bytes:
        ``cuda_context_bytes`` as given or measured, else by :attr:`module_loading`
        (:data:`probes.cuda_stack.LAZY_CONTEXT_BYTES` or :data:`~probes.cuda_stack.EAGER_CONTEXT_BYTES`)."""
        return self.cuda_context_bytes or default_context_bytes(self.module_loading.lazy)

    @property
    def gpu(self) -> GPUInfo | None:
        """The GPU advisor plans for (the first; mixed GPU models are flagged in ``notes``)."""
        return self.gpus[0] if self.gpus else None

    @property
    def installed(self) -> dict[str, str | None] | None:
        """The stack packages where the plan runs (import name → version, None when absent: ``HostInfo.packages``);
        None when planning for catalog hardware, whose software advisor does not know."""
        if self.source == "catalog" or self.host is None:
            return None
        return dict(self.host.packages)

    @property
    def network(self) -> Network:
        """The network between nodes: the one given, else :data:`advisor.core.vocabulary.DEFAULT_NETWORK`."""
        return Network(self.interconnect) if self.interconnect else DEFAULT_NETWORK

    @property
    def network_gbit_s(self) -> float:
        """Bandwidth of one NIC between nodes, Gb/s: ``inter_node_gbit_s``, else on InfiniBand the typical server's
        adapters (:attr:`typical_nic_gbit_s`), else the network's catalog figure."""
        if self.inter_node_gbit_s:
            return self.inter_node_gbit_s
        if self.network == Network.INFINIBAND and self.typical_nic_gbit_s:
            return self.typical_nic_gbit_s
        return self.network.gbit_s

    @property
    def network_label(self) -> str:
        """The network's name with its InfiniBand generation at :attr:`network_gbit_s` (HDR 200, NDR 400 Gb/s a port:
        https://www.nvidia.com/en-us/networking/infiniband-switching/), e.g. 'InfiniBand NDR'; 'Ethernet'."""
        if self.network != Network.INFINIBAND:
            return self.network.label
        generation = INFINIBAND_GENERATIONS.get(self.network_gbit_s)
        return f"InfiniBand {generation}" if generation else "InfiniBand"

    @property
    def nics(self) -> int:
        """NICs per node: ``nics_per_node`` as given, else 1 on Ethernet and one per GPU on InfiniBand, as on
        HGX / DGX-class nodes (DGX A100: eight 200 Gb/s HDR adapters for eight GPUs, DGX H100: eight 400 Gb/s NDR,
        https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html "Hardware Overview")."""
        if self.nics_per_node:
            return self.nics_per_node
        return max(len(self.gpus), 1) if self.network == Network.INFINIBAND else 1

    @property
    def inter_node_bytes_per_s(self) -> float:
        """The node's bandwidth to the other nodes, bytes/s: :attr:`nics` × :attr:`network_gbit_s`. The node's
        GPUs share it: a collective between nodes is limited by what the whole node sends."""
        return gbit_to_bytes_per_s(self.network_gbit_s) * self.nics

    @property
    def num_gpus(self) -> int:
        """GPUs in all nodes together."""
        return len(self.gpus) * self.nodes

    @property
    def host_memory(self) -> int | None:
        """RAM of one node that offloaded states may use, bytes: ``--host-memory``, else the probed host's RAM, else
        for catalog GPUs the catalog's typical server's (:attr:`typical_host_memory_bytes`, :attr:`host_memory_assumed`);
        None only when none of them is known (never unlimited for a catalog GPU)."""
        if self.host_memory_bytes is not None:
            return self.host_memory_bytes
        if self.host is not None and self.host.ram_bytes:
            return self.host.ram_bytes
        return self.typical_host_memory_bytes

    @property
    def host_memory_assumed(self) -> bool:
        """The host RAM is the catalog's typical server's, not given (``--host-memory``) nor probed."""
        return (self.host_memory_bytes is None and not (self.host is not None and self.host.ram_bytes)
                and self.typical_host_memory_bytes is not None)

    @property
    def all_pairs_nvlink(self) -> bool:
        """True when every pair of GPUs of a node is joined by NVLink (False with fewer than 2 GPUs)."""
        return bool(self.links) and all(link.nvlink_count > 0 for link in self.links)

    def _nvlink_pairs(self) -> set[tuple[int, int]]:
        return {(min(link.a, link.b), max(link.a, link.b)) for link in self.links if link.nvlink_count > 0}

    @property
    def nvlink_ring(self) -> bool:
        """True when a ring through all of a node's GPUs runs over NVLink alone (NVSwitch, DGX-1's cube-mesh; not
        bridged pairs), so ring collectives (NCCL) run at NVLink speed; False with fewer than 2 GPUs."""
        if self.all_pairs_nvlink:
            return True
        pairs, n = self._nvlink_pairs(), len(self.gpus)
        if n < 2 or not pairs or n > 8:
            return False

        def extend(path: list[int]) -> bool:
            if len(path) == n:
                return (min(path[0], path[-1]), max(path[0], path[-1])) in pairs
            return any(extend(path + [g]) for g in range(n)
                       if g not in path and (min(path[-1], g), max(path[-1], g)) in pairs)
        return extend([0])

    @property
    def nvlink_domain(self) -> int:
        """GPUs in the largest group of a node whose every pair is NVLink-joined: how far tensor parallelism can
        reach at NVLink speed (1: none). The largest clique of the NVLink graph
        (:func:`probes.topology.largest_clique`), never an enumeration of subsets: a 128-GPU node answers in
        microseconds."""
        if self.all_pairs_nvlink:
            return len(self.gpus)
        return largest_clique(self._nvlink_pairs())


def derive_capabilities(compute_capability: str, catalog_id: str | None = None) -> dict:
    """Capabilities implied by a compute capability.

    Args:
        compute_capability: 'major.minor', e.g. '8.0'.
        catalog_id: the catalog entry, used for A100's and H100's 64-element alignment.
    Returns:
        dict with ``tensor_cores``, ``tensor_core_generation``, ``bf16``, ``tf32``, ``alignment_multiple``.
    """
    major, minor = (int(x) for x in compute_capability.split("."))
    tensor_cores = major >= 7
    generation = _TENSOR_CORE_GENERATION.get((major, minor))
    if tensor_cores and generation is None:
        generation = max(g for (mj, _), g in _TENSOR_CORE_GENERATION.items() if mj <= major)
    ampere_or_newer = major >= 8
    # A100 and H100 / H200 (the data-center parts, cc 8.0 and 9.0) run their largest tensor-core tiles on 128-byte
    # aligned dimensions, 64 fp16 / bf16 elements (NVIDIA "Matrix Multiplication Background", Tensor Core
    # Requirements: "multiples of 128 bytes" on A100 and later; the HF guide's 64 for A100); 8 elsewhere
    data_center = bool(catalog_id and catalog_id.startswith(("a100", "h100", "h200"))) or (major, minor) in {(8, 0),
                                                                                                            (9, 0)}
    return {
        "tensor_cores": tensor_cores,
        "tensor_core_generation": generation if tensor_cores else None,
        "bf16": ampere_or_newer,
        "tf32": ampere_or_newer,
        "alignment_multiple": 64 if data_center else 8,
    }


def read_host() -> HostInfo:
    """Read this machine's CPU cores, RAM and CPU flags (Linux ``/proc``; portable fallbacks).

    Never raises: a missing ``/proc`` leaves optional fields ``None``.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    ram = 0
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    model = None
    flags: list[str] = []
    mhz = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and not flags:
                    wanted = {"avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
                    flags = sorted(wanted.intersection(value.split()))
                elif key == "cpu MHz" and mhz is None:
                    mhz = float(value)
    except (OSError, ValueError):
        pass
    torch_version, torch_cuda = torch_build()
    return HostInfo(cpu_cores=cores, ram_bytes=ram, cpu_model=model, cpu_flags=flags, cpu_mhz=mhz,
                    packages=installed_packages(), torch_version=torch_version, torch_cuda_version=torch_cuda,
                    cuda_module_loading=module_loading_env())
