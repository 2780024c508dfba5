"""Reading the wizard's fields, and building the inputs of an option from its declaration."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel

#: The value of a choice left to the planner (what an optional option's None means), as ``recommend --method``'s.
AUTO = "auto"


def whole_number(text: str, default):
    """``text`` as a whole number, or ``default`` when the field is empty. Bounds are not checked here:
    the API refuses a bad value with the same one line as the command line (:mod:`advisor.app.options`),
    and the step shows it."""
    try:
        return int(text)
    except (TypeError, ValueError):
        return default


def option_choices(model: type[BaseModel], name: str) -> tuple[str, str, list[tuple[str, Any]]]:
    """The CLI's flag, help and choices of the optional option ``name`` of ``model`` (a pydantic option group of
    :mod:`advisor.app.options`), as a select shows them: :data:`AUTO` first (None: the planner's), then a ``Literal``'s
    values as the CLI spells them, or for an optional bool ``on (--flag)`` and ``off (--no-flag)``.

    Raises:
        TypeError: a field that is neither an optional ``Literal`` nor an optional bool (the wizard has no select for
            it).
    """
    field = model.model_fields[name]
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    flag = extra.get("flag") or "--" + name.replace("_", "-")
    kinds = [a for a in typing.get_args(field.annotation) if a is not type(None)]
    if typing.get_origin(field.annotation) not in (typing.Union, types.UnionType) or len(kinds) != 1:
        raise TypeError(f"{model.__name__}.{name} is not an optional option")
    kind = kinds[0]
    if kind is bool:
        values: list[tuple[str, Any]] = [(f"on ({flag})", True), (f"off (--no-{flag[2:]})", False)]
    elif typing.get_origin(kind) is Literal:
        values = [(str(v), v) for v in typing.get_args(kind)]
    else:
        raise TypeError(f"{model.__name__}.{name} is neither a Literal nor a bool")
    return flag, field.description or "", [(AUTO, AUTO), *values]
