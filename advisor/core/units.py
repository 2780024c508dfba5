"""Units, in one place: binary sizes for display and network rates.

Bytes are bytes and time is seconds everywhere; GiB and MiB appear only where a number is shown to a
person or read from one. Network bandwidths are quoted in gigabits per second (Gb/s, the way
InfiniBand and Ethernet are sold), link bandwidths in gigabytes per second (GB/s, as NVIDIA's
datasheets give NVLink and PCIe).
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3


def gbit_to_bytes_per_s(gbit_s: float) -> float:
    """Gigabits per second → bytes per second (10^9 bits / 8)."""
    return gbit_s * 1e9 / 8


def gbyte_to_bytes_per_s(gbyte_s: float) -> float:
    """Gigabytes per second (10^9 bytes) → bytes per second."""
    return gbyte_s * 1e9
