"""Reading the wizard's fields."""

from __future__ import annotations


def positive_int(text: str, default):
    """``text`` as a positive integer, else ``default`` (an empty or bad field keeps the default)."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        return default
    return value if value > 0 else default
