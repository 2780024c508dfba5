"""``advisor estimate --simulate --timeline FILE.svg|.html``: the simulated step's memory over time, by kind.

The picture PyTorch's memory visualiser draws from a real run's snapshot ("Understanding CUDA Memory Usage",
https://pytorch.org/docs/stable/torch_cuda_memory.html, "Active Memory Timeline"), drawn before the run from the
fake-tensor step (:mod:`advisor.measure.simulate`, :mod:`advisor.measure.timeline`): the live bytes of weights,
gradients, optimizer states, activations and temporaries stacked over the allocation and free events, the phases
(build, forward, backward, optimizer) as bands behind them, and the peak marked with its size and the ATen operator
whose allocation reached it. The SVG is drawn with drawsvg (https://github.com/cduck/drawsvg, "Usage"); every area,
band and the peak carry a ``<title>``, which browsers show on hover; the .html embeds the SVG with a legend table.
Text from files (the model's id) goes through :func:`advisor.core.text.shown`, and drawsvg escapes it for XML.
No torch: the timeline is plain lists.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from advisor.app.files import check_target, write_atomic
from advisor.core.errors import UsageError
from advisor.core.text import shown
from advisor.core.units import GIB, KIB, MIB

#: The file types ``--timeline`` writes, by suffix.
SUFFIXES = (".svg", ".html")
#: Each kind of :data:`advisor.measure.timeline.KINDS`, in its order (bottom of the stack first): its name on the
#: picture, its colour (the card's and the wizard's palette: rich's dodger_blue2, green3,
#: gold3, orange_red1, magenta) and what it holds.
STYLE = {
    "weights": ("weights", "#1c86ee", "parameters and buffers"),
    "gradients": ("gradients", "#00cd00", "the parameters' accumulated .grad"),
    "optimizer_states": ("optimizer states", "#cdad00", "the optimizer's state tensors"),
    "activations": (
        "activations",
        "#ff4500",
        "tensors a forward pass keeps for backward (autocast's 16-bit weight copies, the logits), the batch",
    ),
    "temporaries": (
        "temporaries",
        "#d040d0",
        "what a pass frees again: activation gradients, recomputed activations, casts, the step's buffers",
    ),
}
#: The kinds in drawing order (the measure layer is imported only inside functions: it is off the fast path).
KINDS = tuple(STYLE)
#: The phase bands' fills (light, behind the areas) and labels.
PHASES = {
    "build": ("#eeeeee", "build"),
    "forward": ("#e8f0ff", "fwd"),
    "backward": ("#fff0e6", "bwd"),
    "optimizer": ("#eaf7ea", "opt"),
}
WIDTH, HEIGHT = 960, 480  #: the picture's size, pixels
LEFT, RIGHT, TOP, BOTTOM = 80, 930, 72, 380  #: the plot area's edges, pixels
COLUMNS = 600  #: at most this many moments drawn (each the event with the most live bytes of its run of events)


def check_timeline_path(path: str) -> Path:
    """The ``--timeline`` target, refused before the simulation runs.

    Raises:
        UsageError: a suffix other than .svg or .html (exit 2).
        OutputError: a folder that is missing or not writable, a target that is not a regular file (exit 7).
    """
    if Path(path).suffix.lower() not in SUFFIXES:
        raise UsageError(f"--timeline {shown(path)}: expected a file name ending in .svg or .html")
    return check_target(path)


def _unit(peak: int) -> tuple[int, str]:
    """The binary unit the axis counts in: GiB from 1 GiB, MiB from 1 MiB, else KiB."""
    return (GIB, "GiB") if peak >= GIB else (MIB, "MiB") if peak >= MIB else (KIB, "KiB")


def size(nbytes: int, unit: tuple[int, str]) -> str:
    """Bytes in the axis's unit, two decimals: ``27.78 MiB``."""
    return f"{nbytes / unit[0]:,.2f} {unit[1]}"


def _ticks(top: float) -> list[float]:
    """Round steps (1, 2, 2.5 or 5 × 10^k, about five of them) from 0 to at least ``top`` (in the axis's unit)."""
    rough = max(top, 1e-9) / 5
    magnitude = 10.0 ** math.floor(math.log10(rough))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= rough)
    return [round(i * step, 10) for i in range(math.ceil(top / step - 1e-9) + 1)]


def timeline_svg(timeline, title: str, subtitle: str) -> str:
    """The SVG of ``timeline`` (an :class:`advisor.measure.timeline.MemoryTimeline`): stacked areas by kind (groups ``id="series-KIND"``, ``data-kind``), the phase bands,
    the peak (group ``id="peak"`` with ``data-bytes``, ``data-op``, ``data-phase``), the axes and a legend in words.

    Raises:
        ValueError: a timeline without an event outside the build (:meth:`advisor.measure.timeline.MemoryTimeline.columns`).
    """
    import drawsvg as dw

    columns, peak = timeline.columns(COLUMNS)
    stride = timeline.stride(COLUMNS)
    unit = _unit(peak.total)
    ticks = _ticks(peak.total / unit[0])
    events = len(timeline.events)

    def x(event: float) -> float:
        return round(LEFT + (RIGHT - LEFT) * event / events, 1)

    def y(nbytes: float) -> float:
        return round(BOTTOM - (BOTTOM - TOP) * nbytes / (ticks[-1] * unit[0]), 1)

    d = dw.Drawing(WIDTH, HEIGHT, font_family="sans-serif")
    d.append(dw.Rectangle(0, 0, WIDTH, HEIGHT, fill="white"))
    d.append(dw.Text(title, 15, LEFT, 22, font_weight="bold"))
    for i, line in enumerate(subtitle.split("\n")):
        d.append(dw.Text(line, 12, LEFT, 40 + 16 * i, fill="#444444"))
    _phase_bands(d, dw, timeline, x)
    for i, kind in enumerate(KINDS):
        d.append(_series(dw, kind, columns, stride, events, x, y, below=KINDS[:i]))
    _axes(d, dw, ticks, unit, events, x, y)
    d.append(_peak_marker(dw, peak, unit, x, y))
    _legend(d, dw, columns, unit)
    return d.as_svg()


def _phase_bands(d, dw, timeline, x) -> None:
    """A light band behind each phase (``<title>``: the phase and its events), labelled where it is wide enough."""
    ends = [start for start, _ in timeline.marks[1:]] + [len(timeline.events)]
    counts: dict[str, int] = {}
    for (start, phase), end in zip(timeline.marks, ends):
        counts[phase] = counts.get(phase, 0) + 1
        fill, label = PHASES[phase]
        band = dw.Rectangle(x(start), TOP, max(round(x(end) - x(start), 1), 0.1), BOTTOM - TOP, fill=fill)
        which = "" if phase == "build" else f" {counts[phase]}"
        band.append_title(f"{phase}{which}: events {start:,} to {end - 1:,}")
        d.append(band)
        if x(end) - x(start) >= 24:
            d.append(dw.Text(label, 10, (x(start) + x(end)) / 2, TOP + 12, text_anchor="middle", fill="#666666"))


def _series(dw, kind: str, columns: list, stride: int, events: int, x, y, below: tuple[str, ...]):
    """One kind's area, stacked on the kinds ``below``: a step outline over the columns."""
    name, colour, holds = STYLE[kind]
    upper, lower = [], []
    for j, column in enumerate(columns):
        base = sum(column.by_kind[k] for k in below)
        left, right = x(j * stride), x(min((j + 1) * stride, events))
        upper += [left, y(base + column.by_kind[kind]), right, y(base + column.by_kind[kind])]
        lower += [right, y(base), left, y(base)]
    for i in range(len(lower) - 2, -1, -2):  # back along the lower edge, right to left
        upper += lower[i : i + 2]
    group = dw.Group(id=f"series-{kind}", data_kind=kind)
    area = dw.Lines(*upper, close=True, fill=colour, fill_opacity=0.85, stroke="none")
    most = max(column.by_kind[kind] for column in columns)
    area.append_title(f"{name}: {holds}; at most {most:,} bytes")
    group.append(area)
    return group


def _axes(d, dw, ticks: list[float], unit: tuple[int, str], events: int, x, y) -> None:
    """The y axis in the unit with grid lines, the x axis of events."""
    for tick in ticks:
        level = y(tick * unit[0])
        d.append(dw.Line(LEFT, level, RIGHT, level, stroke="#cccccc", stroke_width=0.5))
        d.append(dw.Text(f"{tick:g} {unit[1]}", 11, LEFT - 6, level + 4, text_anchor="end"))
    d.append(dw.Line(LEFT, BOTTOM, RIGHT, BOTTOM, stroke="black"))
    d.append(dw.Line(LEFT, TOP, LEFT, BOTTOM, stroke="black"))
    for share in (0, 0.25, 0.5, 0.75, 1):
        event = round(events * share)
        d.append(dw.Text(f"{event:,}", 11, x(event), BOTTOM + 16, text_anchor="middle"))
    d.append(
        dw.Text("allocations and frees, in order (time →)", 12, (LEFT + RIGHT) / 2, BOTTOM + 34, text_anchor="middle")
    )


def _peak_marker(dw, peak, unit: tuple[int, str], x, y):
    """The peak: a dashed line up to it, a dot, and ``peak SIZE · OP (PHASE)``; its title lists the kinds."""
    px, py = x(peak.event + 0.5), y(peak.total)
    group = dw.Group(id="peak", data_bytes=peak.total, data_op=peak.op, data_phase=peak.phase)
    group.append(dw.Line(px, BOTTOM, px, py, stroke="black", stroke_dasharray="4,3"))
    dot = dw.Circle(px, py, 4, fill="black")
    dot.append_title("peak: " + ", ".join(f"{STYLE[k][0]} {size(peak.by_kind[k], unit)}" for k in KINDS))
    group.append(dot)
    anchor = "end" if px > (LEFT + RIGHT) / 2 else "start"
    label = f"peak {size(peak.total, unit)} · {peak.op} ({peak.phase})"
    group.append(
        dw.Text(
            label,
            12,
            px + (-8 if anchor == "end" else 8),
            max(py - 8, TOP + 28),
            text_anchor=anchor,
            font_weight="bold",
        )
    )
    return group


def _legend(d, dw, columns: list, unit: tuple[int, str]) -> None:
    """One swatch and name per kind, with its most bytes (words, not colour alone), on as many rows as it takes."""
    left, top = LEFT, BOTTOM + 52
    for kind in KINDS:
        name, colour, holds = STYLE[kind]
        most = max(column.by_kind[kind] for column in columns)
        text = f"{name} (at most {size(most, unit)})"
        width = 16 + 6.2 * len(text) + 14  # 11-pixel sans-serif: about 6.2 pixels a character
        if left + width > WIDTH and left > LEFT:
            left, top = LEFT, top + 20
        swatch = dw.Rectangle(left, top, 12, 12, fill=colour)
        swatch.append_title(holds)
        d.append(swatch)
        d.append(dw.Text(text, 11, left + 16, top + 10))
        left += width


def timeline_html(svg: str, title: str, subtitle: str, timeline) -> str:
    """A page with the SVG inline, a legend table (each kind's colour, name, bytes at the peak and at most, what it
    holds) and a line on how to read it. Well-formed XML (XHTML), so it parses as the SVG does."""
    columns, peak = timeline.columns(COLUMNS)
    unit = _unit(peak.total)
    rows = []
    for kind in KINDS:
        name, colour, holds = STYLE[kind]
        most = max(column.by_kind[kind] for column in columns)
        rows.append(
            f'<tr data-kind="{kind}"><td><span class="swatch" style="background:{colour}"></span></td>'
            f"<td>{name}</td><td>{size(peak.by_kind[kind], unit)}</td><td>{size(most, unit)}</td>"
            f"<td>{html.escape(holds)}</td></tr>"
        )
    inline = svg.split("?>", 1)[1].lstrip() if svg.startswith("<?xml") else svg
    return (
        '<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en">\n<head>\n'
        f'<meta charset="utf-8"/>\n<title>{html.escape(title)}</title>\n<style>'
        "body{font-family:sans-serif;margin:1.5em}td,th{padding:2px 10px;text-align:left}"
        ".swatch{display:inline-block;width:14px;height:14px}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>{html.escape(subtitle).replace(chr(10), '<br/>')}</p>\n{inline}\n"
        "<table>\n<tr><th></th><th>kind</th><th>at the peak</th><th>at most</th><th>what it holds</th></tr>\n"
        + "\n".join(rows)
        + "\n</table>\n<p>Hover an area, a phase band or the peak for its figures. The peak "
        "is what <code>torch.cuda.max_memory_allocated()</code> would report for this step; the caching "
        "allocator's reserve and the CUDA context come on top (<code>advisor estimate</code>'s device "
        "figure).</p>\n</body>\n</html>\n"
    )


def write_timeline(estimate, path: str | Path) -> Path:
    """Draw ``estimate``'s simulated step (an :class:`advisor.app.api.Estimate` made with ``simulate=True``) to
    ``path``, .svg or .html by its suffix, all or nothing (:func:`advisor.app.files.write_atomic`).

    Raises:
        UsageError: an estimate without a simulated step, or a suffix other than .svg / .html.
        OutputError: the target is refused or the write fails (exit 7).
    """
    simulated = estimate.simulated
    if simulated is None or simulated.timeline is None:
        raise UsageError("--timeline draws the simulated step: add --simulate")
    path = check_timeline_path(str(path))
    plan = estimate.plan
    title = f"{shown(estimate.model.id)}: memory of the simulated training step"
    subtitle = (
        f"{plan.describe()}, seq-len {estimate.workload.seq_len}\nlive tensor bytes by kind over "
        f"{len(simulated.timeline.events):,} allocations and frees: two optimizer steps on fake tensors"
    )
    svg = timeline_svg(simulated.timeline, title, subtitle)
    text = timeline_html(svg, title, subtitle, simulated.timeline) if path.suffix.lower() == ".html" else svg
    return write_atomic(path, text)
