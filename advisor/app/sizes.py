"""Sizes on the command line: '2GiB', '512MiB', '1.5GB' or bytes, exact at any length (issue 44: a number of 400
digits is one line, not an OverflowError)."""

from __future__ import annotations

import argparse
import re
from decimal import Decimal

from advisor.core.limits import MAX_SIZE_BYTES
from advisor.core.units import GIB, KIB, MIB

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": KIB,
    "mib": MIB,
    "gib": GIB,
    "tib": 1024 * GIB,
}


def size(text: str) -> int:
    """'2GiB', '512MiB', '1.5GB' or a number of bytes → bytes.

    Raises:
        argparse.ArgumentTypeError: not a size, not more than 0 bytes, or more than
            :data:`~advisor.core.limits.MAX_SIZE_BYTES` (a number of 400 digits is one line, not an OverflowError).
    """
    match = re.fullmatch(r"\s*(-?)\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(3).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (e.g. 2GiB, 512MiB, 1.5GB or bytes)")
    value = int(Decimal(match.group(2)) * _SIZE_UNITS[unit]) * (-1 if match.group(1) else 1)  # exact at any length
    if value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' must be more than 0 bytes")
    if value > MAX_SIZE_BYTES:
        raise argparse.ArgumentTypeError(f"'{text[:40]}' is more than 1 EiB, the largest size advisor accepts")
    return value
