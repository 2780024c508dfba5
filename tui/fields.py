"""Reading the wizard's fields."""

from __future__ import annotations


def whole_number(text: str, default):
    """``text`` as a whole number, or ``default`` when the field is empty. Bounds are not checked here:
    the API refuses a bad value with the same one line as the command line (:mod:`advisor.app.options`),
    and the step shows it."""
    try:
        return int(text)
    except (TypeError, ValueError):
        return default
