"""``--interconnect LINKS``: the links inside a node and the network between nodes, as updates of a hardware profile."""

from __future__ import annotations

from typing import Any

from advisor.core.errors import UsageError
from advisor.core.text import shown
from probes.hardware import GPULink, HardwareProfile
from advisor.core.vocabulary import Link, Network, values


def interconnect_update(profile: HardwareProfile, interconnect: str | None) -> dict[str, Any]:
    """The profile fields ``--interconnect LINKS`` changes (links inside a node, the network between nodes).

    Raises:
        UsageError: an unknown name, two links or two networks, NVLink on a GPU without it.
    """
    names = [n.strip().lower() for n in (interconnect or "").split(",") if n.strip()]
    links = [n for n in names if n in values(Link)]
    networks = [n for n in names if n in values(Network)]
    unknown = [n for n in names if n not in links + networks]
    if unknown:
        raise UsageError(
            f"--interconnect {shown(unknown[0])}: choose {' or '.join(Link)} (inside a node), "
            f"{' or '.join(Network)} (between nodes)"
        )
    if len(set(links)) > 1 or len(set(networks)) > 1:
        raise UsageError(
            f"--interconnect {shown(','.join(names))}: one link inside a node and one network between nodes"
        )
    update: dict[str, Any] = {}
    if links:
        nvlink = links[0] == Link.NVLINK
        if nvlink and profile.gpu is not None and not profile.gpu.nvlink_bandwidth_gbps:
            raise UsageError(f"--interconnect nvlink: {profile.gpu.name} has no NVLink")
        update["links"] = [
            GPULink(
                a=link.a,
                b=link.b,
                nvlink_count=(link.nvlink_count or 12) if nvlink else 0,
                pcie_relation=None if nvlink else "PHB",
            )
            for link in profile.links
        ]
    if networks:
        update["interconnect"] = networks[0]
        # the network's speed as the profile prices it (InfiniBand: the typical server's adapters where known)
        named = profile.model_copy(update={"interconnect": networks[0], "inter_node_gbit_s": None})
        update["inter_node_gbit_s"] = named.network_gbit_s
    return update
