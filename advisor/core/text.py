"""Strings read from files (a config.json's ``model_type``, an adapter's base model, a plan file's model id) made safe
to show: on a terminal, in an error line, in a comment of an emitted script. A leaf module: it imports nothing.

A string from a file may hold anything: an escape sequence that retitles or clears the terminal (``\\x1b]0;…\\a``,
``\\x1b[2J``), a newline that forges a second ``advisor: error:`` line or ends the comment of a script, a right-to-left
override, a megabyte of text. :func:`shown` is the one function such a string goes through before it is shown.
"""

from __future__ import annotations

#: Characters of one string from a file as shown (a model id is at most a path, a model_type a few words).
MAX_SHOWN = 120
#: Characters of a whole diagnostic line (its own words and the strings it shows).
MAX_LINE = 2000


def _escaped(char: str) -> str:
    """A character that is not printable, as Python writes it in a string literal (``\\n``, ``\\x1b``, ``\\u202e``)."""
    return ascii(char)[1:-1]


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """``value`` as text fit to show on one line: every character that is not printable (control characters, line
    and paragraph separators, format characters such as a right-to-left override) escaped as ``\\xNN`` /
    ``\\uNNNN``, a backslash doubled, and the text cut to ``limit`` characters with ``...`` when longer.

    The result contains no byte below 0x20 and no DEL, so it cannot move the cursor, end a line or end a shell
    comment. Never raises (``str(value)`` of any object; ``limit`` >= 3).
    """
    text = str(value)
    cut = len(text) > limit
    if cut:
        text = text[: limit - 3]
    out = "".join(
        char if char.isprintable() and char != "\\" else "\\\\" if char == "\\" else _escaped(char) for char in text
    )
    return out + "..." if cut else out
