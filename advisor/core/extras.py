"""The optional parts of advisor and the one line that names a missing one.

The base install answers ``recommend``, ``compare``, ``estimate``, ``profile``, ``probe`` and the wizard without
torch or transformers (issue 45: they were 1.2 GB of a first ``make run``). What needs more is an extra of
``pyproject.toml``: ``trial`` (torch, transformers) for ``validate``, ``estimate --simulate`` and counting a model
type advisor has no closed form for; ``train`` (accelerate, peft, trl) for training with the emitted files. A command
that needs a missing extra stops with :class:`MissingExtraError`: one line naming the ``pip install`` that adds it.
This module imports nothing of the project but its errors, and no optional package (``find_spec`` only).
"""

from __future__ import annotations

from importlib.util import find_spec

from advisor.core.errors import UsageError

#: The extras of ``pyproject.toml`` whose modules advisor's commands import, by extra.
EXTRAS: dict[str, tuple[str, ...]] = {"trial": ("torch", "transformers"), "train": ("accelerate", "peft", "trl")}


class MissingExtraError(UsageError):
    """A command needs an optional package the base install leaves out (exit 2, as a usage error)."""


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` (a key of :data:`EXTRAS`) that are not installed here."""
    return [module for module in EXTRAS[extra] if find_spec(module) is None]


def require(extra: str, purpose: str) -> None:
    """Stop with one line when ``extra``'s modules are not all installed.

    Raises:
        MissingExtraError: "``purpose`` needs torch and transformers (the trial extra): pip install -e '.[trial]'".
    """
    absent = missing(extra)
    if absent:
        raise MissingExtraError(
            f"{purpose} needs {' and '.join(absent)} (advisor's '{extra}' extra, not in the base "
            f"install): pip install -e '.[{extra}]' in advisor's folder"
        )
