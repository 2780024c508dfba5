"""Units, in one place: binary sizes for display and network rates.

Bytes are bytes and time is seconds everywhere; GiB and MiB appear only where a number is shown to a
person or read from one. Network bandwidths are quoted in gigabits per second (Gb/s, the way
InfiniBand and Ethernet are sold), link bandwidths in gigabytes per second (GB/s, as NVIDIA's
datasheets give NVLink and PCIe). A duration and a token count are shown the short way (:func:`duration`,
:func:`count`: the compare table's and its bars').
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


def duration(seconds: float) -> str:
    """Seconds as the largest sensible unit: 45 s, 12.5 min, 3.2 h, 4.1 d, 2.1 y (Julian years of 365.25 days)."""
    for unit, size in (("y", 365.25 * 86400), ("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.0f} s"


def count(n: int) -> str:
    """A token count the short way: 2T, 1B, 500M, 12,345."""
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6)):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{unit}"
    return f"{n:,}"
