"""The optional training packages installed on this machine (what makes a plan's stack value runnable here).

Reads package metadata only: imports none of them. The packages and their distribution names are the
vocabulary's (:data:`advisor.core.kernels.STACK_PACKAGES`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from advisor.core.kernels import STACK_PACKAGES


def installed_packages() -> dict[str, str | None]:
    """The :data:`STACK_PACKAGES` on this machine: import name → installed version ('?' when the distribution's
    metadata is missing), None when the module cannot be found. Reads metadata only: imports nothing."""
    out: dict[str, str | None] = {}
    for name, dist in STACK_PACKAGES.items():
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out[name] = None
            continue
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "?"
    return out
