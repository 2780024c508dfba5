"""Pictures in the terminal (rich): the card's memory bar split by component, and ``advisor compare``'s time and cost
per GPU as bars. Display only: every figure comes from the engine's models. Each bar's parts are told apart by a
letter and a key in words as well as by colour (WCAG 2.2, "Use of Color", https://www.w3.org/TR/WCAG22/#use-of-color:
colour is not the only visual means of conveying information). No torch, transformers or textual.
"""

from __future__ import annotations

from rich.bar import Bar
from rich.console import Group
from rich.table import Table
from rich.text import Text

from advisor.core.units import GIB, count, duration
from advisor.engine.memory import MemoryEstimate

#: The card bar's parts, bottom first: (letter, name, colour, the memory components it adds up). "other" is what the
#: device holds beyond the four named ones (temporaries, the CUDA context, the caching allocator's reserve): the
#: bar's parts add up to ``device_bytes``. The colours are the wizard's (``tui/widgets.py``).
PARTS = (
    ("W", "weights", "dodger_blue2", ("weights_bytes",)),
    ("G", "gradients", "green3", ("gradients_bytes",)),
    ("O", "optimizer states", "gold3", ("optimizer_states_bytes",)),
    ("A", "activations", "orange_red1", ("activations_bytes",)),
    ("+", "other", "grey62", ()),
)


def memory_parts(mem: MemoryEstimate) -> list[tuple[str, str, str, int]]:
    """(letter, name, colour, bytes) of each part of the card's bar: the named components, and the rest of
    ``device_bytes`` as "other" (never below 0)."""
    components = mem.components.model_dump()
    parts = [(letter, name, colour, sum(components[k] for k in keys)) for letter, name, colour, keys in PARTS[:-1]]
    letter, name, colour, _ = PARTS[-1]
    return parts + [(letter, name, colour, max(mem.device_bytes - sum(p[3] for p in parts), 0))]


def memory_bar(mem: MemoryEstimate, cells: int) -> tuple[Text, list[tuple[str, str, str, int]]]:
    """A bar of ``cells`` characters for the device's memory (its full length the capacity, or the device's use when
    that is more): each part's cells start with its letter and are drawn in its colour, the free rest ``░``. The cells
    are shared out by largest remainder (the bar's filled length is the device's share, rounded; a small part beside
    another small one still gets its cell). Returns the bar and the parts it shows (not a part given no cell: the
    key names only these)."""
    scale = max(mem.capacity_bytes, mem.device_bytes, 1)
    parts = memory_parts(mem)
    exact = [cells * p[3] / scale for p in parts]
    counts = [int(x) for x in exact]
    spare = min(round(sum(exact)), cells) - sum(counts)
    for i in sorted(range(len(parts)), key=lambda i: counts[i] - exact[i])[: max(spare, 0)]:
        counts[i] += 1
    bar, shown = Text(), []
    for (letter, _, colour, _), n, part in zip(parts, counts, parts):
        if n:
            bar.append(letter, style=f"bold black on {colour}")
            bar.append("█" * (n - 1), style=colour)
            shown.append(part)
    bar.append("░" * (cells - sum(counts)), style="dim")
    return bar, shown


def memory_key(parts: list[tuple[str, str, str, int]], width: int) -> Text:
    """The bar's key: each part's letter (in its colour) and name, with its GiB when the line has room at ``width``
    columns (after the card's 7-column indent), else the names alone (cut with an ellipsis on a narrower one)."""

    def key(figures: bool) -> Text:
        text = Text("       ", no_wrap=True, overflow="ellipsis")
        for i, (letter, name, colour, nbytes) in enumerate(parts):
            text.append(" · " if i else "")
            text.append(letter, style=f"bold black on {colour}")
            text.append(f" {name}" + (f" {nbytes / GIB:,.2f}" if figures else ""))
        return text.append(" GiB" if figures else "")

    full = key(True)
    return full if full.cell_len <= width else key(False)


def comparison_chart(c, width: int = 80) -> Group:
    """``advisor compare``'s time to train on its tokens per GPU as bars, and the cost per billion tokens when some
    row has a price; ``c`` is an :class:`advisor.app.compare.Comparison`. Rows in the table's order; a GPU where
    nothing fits (or without a price) gets its words instead of a bar."""
    label = max((len(r.gpu) for r in c.rows), default=0)
    cells = max(10, min(width - label - 14, 60))
    charts = [
        (
            f"time to train on {count(c.tokens)} tokens (shorter is faster)",
            "cyan",
            lambda r: r.time_s,
            duration,
            "no plan fits",
        )
    ]
    if any(r.cost_per_billion_tokens_usd is not None for r in c.rows):
        charts.append(
            (
                "US dollars per 1B tokens (shorter is cheaper)",
                "green",
                lambda r: r.cost_per_billion_tokens_usd,
                lambda usd: f"{usd:,.0f}",
                "no price",
            )
        )
    parts = []
    for title, colour, value, words, missing in charts:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, min_width=label)
        grid.add_column(width=cells)
        grid.add_column(justify="right", no_wrap=True)
        values = [value(r) if r.fits else None for r in c.rows]
        top = max((v for v in values if v is not None), default=0) or 1
        for r, v in zip(c.rows, values):
            if v is None:
                grid.add_row(r.gpu, Text(missing if r.fits else "no plan fits", style="dim"), "")
            else:
                grid.add_row(r.gpu, Bar(top, 0, v, width=cells, color=colour), words(v))
        parts += [Text(""), Text(title, style="bold"), grid]
    return Group(*parts)
