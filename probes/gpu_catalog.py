"""The shipped GPU catalog: datasheet facts for GPUs the user may plan for without having them.

The data lives in ``probes/data/gpus.json``, one entry per GPU with the URL of its datasheet.
TFLOPS are dense (the datasheets' sparse figures halved); memory is the nominal capacity.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from typing import Literal
from importlib import resources

from pydantic import BaseModel, Field

from advisor.core.errors import UnknownGPUError
from probes.hardware import GPUInfo, GPULink, HardwareProfile, PeakTflops, derive_capabilities
from advisor.core.limits import MAX_GPUS_PER_NODE
from advisor.core.text import shown
from advisor.core.units import GIB, MIB


class CatalogGPU(BaseModel):
    """One catalog entry (see ``probes/data/gpus.json``)."""

    id: str
    name: str
    nvml_name_patterns: list[str] = Field(description="regular expressions matching NVML's device name")
    compute_capability: str
    memory_gib: float = Field(description="nominal capacity (the datasheet's), GiB")
    memory_total_mib: int | None = Field(
        None,
        description="what the driver reports as total with the default "
        "settings, MiB (ECC on a datacenter card's GDDR keeps "
        "1/16); None: memory_gib",
    )
    peak_tflops: PeakTflops
    memory_bandwidth_gbps: float
    nvlink_bandwidth_gbps: float | None
    nvlink_links: int
    nvlink_topology: Literal["nvswitch", "cube-mesh", "pairs", "none"] = Field(
        description="how NVLink joins a node's GPUs: NVSwitch (every pair), DGX-1's hybrid cube-mesh, a bridge "
        "between two cards, or not at all"
    )
    topology_source: str = Field(description="where the topology is documented")
    peer_to_peer: bool = Field(True, description="PCIe peer-to-peer between the cards (False: through host memory)")
    pcie_generation: int
    tdp_w: float
    source_url: str
    note: str | None = None
    host_memory_gib_per_gpu: float = Field(
        description="RAM of the catalog's typical server for this GPU over its "
        "GPUs, GiB: what offload is checked against without "
        "--host-memory"
    )
    host_memory_source: str = Field(description="the server the host RAM figure is from, with its URL")
    nic_gbit_s: float | None = Field(
        None,
        description="the catalog's typical server's InfiniBand adapters, Gb/s per NIC "
        "(one a GPU): what an InfiniBand network is priced at without "
        "--inter-node-gbps; None: the network's catalog figure (HDR)",
    )
    nic_source: str | None = Field(None, description="the server the NIC figure is from, with its URL")

    @property
    def total_bytes(self) -> int:
        """The memory a process can plan with, bytes: what NVML reports as total on this GPU (``memory_total_mib``;
        the nominal ``memory_gib`` where the catalog has no reading), as the live probe reads it."""
        return self.memory_total_mib * MIB if self.memory_total_mib else int(self.memory_gib * GIB)


@lru_cache(maxsize=1)
def catalog() -> dict[str, CatalogGPU]:
    """All catalog GPUs by id, in file order."""
    text = resources.files("probes").joinpath("data/gpus.json").read_text(encoding="utf-8")
    return {entry["id"]: CatalogGPU(**entry) for entry in json.loads(text)["gpus"]}


def parse_gpu_spec(spec: str) -> tuple[CatalogGPU, int]:
    """Parse ``NAME[:COUNT]`` (e.g. ``a100-80gb:8``).

    Raises:
        UnknownGPUError: unknown name (the message lists the known names) or a bad count.
    """
    name, _, count_text = spec.strip().partition(":")
    entries = catalog()
    key = name.strip().lower()
    if key not in entries:
        near = near_gpus(key)
        raise UnknownGPUError(
            f"unknown GPU '{shown(name)}'; "
            + (f"did you mean {', '.join(near)}?" if near else f"known: {', '.join(entries)}")
        )
    count = 1
    if count_text:
        digits = count_text.strip()
        if not (digits.isascii() and digits.isdigit()) or not 1 <= int(digits) <= MAX_GPUS_PER_NODE:
            raise UnknownGPUError(
                f"bad GPU count '{shown(count_text)}' in '{shown(spec)}': give a whole number from 1 to "
                f"{MAX_GPUS_PER_NODE} (GPUs per node; --nodes for more)"
            )
        count = int(digits)
    return entries[key], count


def near_gpus(name: str) -> list[str]:
    """Catalog ids that an unknown GPU name may have meant, in catalog order: those whose id or name contains it,
    letters and digits only and case aside ('h100' -> h100-sxm, h100-pcie; '4090' and 'RTX 4090' -> rtx-4090),
    else difflib's close matches of the id (none: an empty list)."""

    def plain(text: str) -> str:
        return "".join(c for c in text.lower() if c.isalnum())

    needle = plain(name)
    entries = catalog()
    found = [e.id for e in entries.values() if needle and (needle in plain(e.id) or needle in plain(e.name))]
    return found or difflib.get_close_matches(name.lower(), list(entries), n=3, cutoff=0.6)


def gpu_info_from_catalog(entry: CatalogGPU, index: int = 0) -> GPUInfo:
    """A ``GPUInfo`` built from datasheet facts alone (no live readings)."""
    return GPUInfo(
        index=index,
        name=entry.name,
        catalog_id=entry.id,
        compute_capability=entry.compute_capability,
        memory_total_bytes=entry.total_bytes,
        pcie_generation=entry.pcie_generation,
        pcie_max_generation=entry.pcie_generation,
        pcie_width=16,
        pcie_max_width=16,
        default_power_limit_w=entry.tdp_w,
        peak_tflops=entry.peak_tflops,
        memory_bandwidth_gbps=entry.memory_bandwidth_gbps,
        nvlink_bandwidth_gbps=entry.nvlink_bandwidth_gbps,
        peer_to_peer=entry.peer_to_peer,
        source_url=entry.source_url,
        **derive_capabilities(entry.compute_capability, entry.id),
    )


def nvlinked(entry: CatalogGPU, a: int, b: int) -> bool:
    """Whether the board type joins GPUs ``a`` < ``b`` of one node by NVLink (``entry.nvlink_topology``, sourced
    in ``entry.topology_source``): NVSwitch every pair; a bridge the pairs (0, 1), (2, 3), …; DGX-1's hybrid
    cube-mesh each quad fully and each GPU to its counterpart in the other quad."""
    if not entry.nvlink_bandwidth_gbps:
        return False
    if entry.nvlink_topology == "nvswitch":
        return True
    if entry.nvlink_topology == "pairs":
        return a // 2 == b // 2
    if entry.nvlink_topology == "cube-mesh":
        return a // 4 == b // 4 or b == a + 4
    return False


def profile_from_catalog(spec: str, nodes: int = 1) -> HardwareProfile:
    """Hardware profile for ``--gpu NAME[:COUNT]`` and ``--nodes N``.

    GPU pairs are NVLink-joined as the board type joins them (:func:`nvlinked`), else their PCIe relation is
    unknown.

    Raises:
        UnknownGPUError: see :func:`parse_gpu_spec`.
    """
    entry, count = parse_gpu_spec(spec)
    gpus = [gpu_info_from_catalog(entry, i) for i in range(count)]
    per_link = entry.nvlink_links if entry.nvlink_topology != "cube-mesh" else max(entry.nvlink_links // 4, 1)
    links = [
        GPULink(a=i, b=j, nvlink_count=per_link if nvlinked(entry, i, j) else 0)
        for i in range(count)
        for j in range(i + 1, count)
    ]
    notes = [f"planned from the datasheet of {entry.name} ({entry.source_url}); no live readings"]
    if entry.note:
        notes.append(f"{entry.id}: {entry.note}")
    if count > 1:
        notes.append(f"{entry.id} links: {entry.nvlink_topology} ({entry.topology_source})")
    return HardwareProfile(
        source="catalog",
        host=None,
        gpus=gpus,
        links=links,
        nodes=nodes,
        notes=notes,
        typical_host_memory_bytes=int(entry.host_memory_gib_per_gpu * count * GIB),
        typical_host_source=entry.host_memory_source,
        typical_nic_gbit_s=entry.nic_gbit_s,
    )


def match_catalog(nvml_name: str) -> CatalogGPU | None:
    """The catalog entry whose NVML-name pattern matches a probed device name, if any."""
    for entry in catalog().values():
        if any(re.search(p, nvml_name, re.IGNORECASE) for p in entry.nvml_name_patterns):
            return entry
    return None
