"""Renderables the wizard shows: the memory bar, the profile and hardware summaries, the
explanation of one setting. Display only: every figure comes from the engine's models."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import RadioButton

from advisor.app.report import VERDICTS
from advisor.core.text import MAX_LINE, shown
from advisor.engine.memory import MemoryEstimate
from advisor.core.units import GIB
from advisor.engine.recommendation import Recommendation, SettingDecision
from probes.hardware import HardwareProfile
from probes.model import ModelProfile

#: Memory components in bar order, with their colours.
COMPONENTS = (
    ("weights_bytes", "weights", "dodger_blue2"),
    ("gradients_bytes", "gradients", "green3"),
    ("optimizer_states_bytes", "optimizer", "gold3"),
    ("activations_bytes", "activations", "orange_red1"),
    ("temporary_bytes", "temporary", "magenta"),
    ("cuda_context_bytes", "context", "grey62"),
)


def plain(text: object) -> Text:
    """``text`` as it is, never as markup, each of its lines' control characters escaped (:func:`shown`): a Static
    given a string parses Textual's markup, so an error naming a folder 'a[/b]' or a GPU search '[/' typed in the
    wizard raised MarkupError and closed it (issue 44), and an escape sequence from a config reached the terminal."""
    return Text("\n".join(shown(line, MAX_LINE) for line in str(text).split("\n")))


def memory_bar(memory: MemoryEstimate, width: int = 60) -> Group:
    """A stacked bar of the peak's components against the device's usable memory, and a legend.

    The bar's full width is the capacity; the part past the usable mark is the safety margin.
    """
    capacity = max(memory.capacity_bytes, 1)
    parts = memory.components.model_dump()
    bar = Text()
    used = 0
    for key, _, colour in COMPONENTS:
        cells = round(width * parts.get(key, 0) / capacity)
        bar.append("█" * cells, style=colour)
        used += cells
    usable_cell = round(width * memory.usable_bytes / capacity)
    rest = max(width - used, 0)
    free_before_margin = max(usable_cell - used, 0)
    bar.append("░" * min(free_before_margin, rest), style="grey35")
    bar.append("▒" * max(rest - free_before_margin, 0), style="grey23")
    legend = Text()
    for key, label, colour in COMPONENTS:
        if parts.get(key, 0):
            legend.append("■ ", style=colour)
            legend.append(f"{label} {parts[key] / GIB:.2f}  ")
    words, colour = VERDICTS[memory.device_verdict if memory.host_bytes else memory.verdict]
    fits = Text(words, style=f"bold {colour}")
    head = Text.assemble(
        f"Memory: {memory.device_bytes / GIB:.2f} GiB of {memory.usable_bytes / GIB:.2f} GiB usable "
        f"({memory.capacity_bytes / GIB:.1f} GiB, ▒ = safety margin) ",
        fits,
    )
    if not memory.host_bytes:
        return Group(head, bar, legend)
    usable = memory.host_usable_bytes  # an offload: the host's RAM has its own verdict, as in the memory table
    host = Text(f"Host RAM (offload): {memory.host_bytes / GIB:.2f} GiB of ")
    if usable is None:
        host.append("unknown RAM ")
        host.append("unchecked: --host-memory SIZE", style="bold yellow")
    else:
        words, colour = VERDICTS[memory.host_verdict]
        host.append(f"{usable / GIB:.2f} GiB usable ")
        host.append(words, style=f"bold {colour}")
    return Group(head, host, bar, legend)


def hardware_summary(hw: HardwareProfile) -> Table | Text:
    """The detected GPUs with their facts, or the plain line of a machine without one."""
    if not hw.gpus:
        host = hw.host
        where = f" ({host.cpu_cores} CPU cores, {host.ram_bytes / GIB:.0f} GiB RAM)" if host else ""
        return Text(f"No NVIDIA GPU found: advisor plans for training on the CPU{where}.", style="yellow")
    t = Table(box=None, pad_edge=False, title=f"Detected ({hw.source})", title_justify="left")
    for col in ("#", "GPU", "memory", "cc", "bf16", "tf32", "temp"):
        t.add_column(col)
    for g in hw.gpus:
        t.add_row(
            str(g.index),
            plain(g.name),
            f"{g.memory_total_bytes / GIB:.0f} GiB",
            g.compute_capability,
            "yes" if g.bf16 else "no",
            "yes" if g.tf32 else "no",
            f"{g.temperature_c:.0f} °C" if g.temperature_c is not None else "—",
        )
    return t


def profile_summary(p: ModelProfile) -> Table:
    """The model's facts from its config."""
    t = Table(box=None, show_header=False, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("model", plain(f"{p.id} ({p.model_type}, {p.family}, from {p.source})"))
    t.add_row("parameters", f"{p.num_parameters:,} ({p.parameter_count_method}) with the {p.task} head")
    if p.num_experts:
        t.add_row(
            "experts",
            f"{p.num_experts} routed, top-{p.experts_per_token}: {p.active_parameters:,} parameters active per token",
        )
    t.add_row(
        "shape", f"{p.num_layers} layers, hidden {p.hidden_size}, {p.num_attention_heads} heads, vocab {p.vocab_size:,}"
    )
    t.add_row(
        "dtype",
        plain(
            f"{p.checkpoint_dtype}"
            + (f", stored in {p.quantization.label}" if p.quantization else "")
            + f"; max positions {p.max_position_embeddings or 'unbounded'}"
        ),
    )
    return t


def value_text(value) -> str:
    """A setting's value as the tables show it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def explanation(name: str, decision: SettingDecision) -> Group:
    """Why a setting has its value: the rationale, the rules and their sources, the alternatives that lost."""
    parts: list = [Text.assemble((f"{name} = {value_text(decision.value)}", "bold"), f" — {decision.rationale}")]
    if decision.rule_ids:
        parts.append(Text(f"rules: {', '.join(decision.rule_ids)}", style="cyan"))
    for source in decision.sources:
        parts.append(Text(f"  {source.title} <{source.url}>", style="dim"))
    for alt in decision.alternatives:
        parts.append(Text(f"  ✗ {value_text(alt.value)}: {alt.reason}"))
    return Group(*parts)


def plan_line(rec: Recommendation) -> Text:
    """The chosen plan and its estimates in one line."""
    p, s = rec.plan, rec.speed
    where = f"{p.num_gpus} x {rec.hardware.gpu.name}" if rec.hardware.gpu else "the CPU"
    return Text.assemble(
        ("Plan: ", "bold"),
        f"{p.describe(data_parallel=False)}, {p.parallelism} on {where} — "
        f"est. {s.step_time_s:.3f} s/step, {s.tokens_per_s:,.0f} tokens/s, MFU {s.mfu:.0%}",
    )


def plan_differences(plan, chosen) -> str:
    """Every setting in which ``plan`` differs from the chosen plan, as ``name=value`` (none: "same settings")."""
    theirs, ours = plan.model_dump(), chosen.model_dump()
    return ", ".join(f"{k}={value_text(v)}" for k, v in theirs.items() if ours.get(k) != v) or "same settings"


def alternatives_table(rec: Recommendation) -> Table:
    """The next best plans: every setting that differs from the chosen plan, their memory and speed."""
    t = Table(box=None, pad_edge=False, title="Next best plans (what differs from the plan)", title_justify="left")
    for col in ("differs in", "memory", "tokens/s", "fallbacks"):
        t.add_column(col)
    for alt in rec.alternative_plans:
        t.add_row(
            plan_differences(alt.plan, rec.plan),
            f"{alt.device_bytes / GIB:.1f} GiB",
            f"{alt.tokens_per_s:,.0f}",
            str(alt.fallback_penalty),
        )
    return t


class MarkedRadioButton(RadioButton):
    """A radio button whose state shows by its mark, not by colour alone (issue 45): ● chosen, ○ not."""

    @property
    def BUTTON_INNER(self) -> str:  # noqa: N802 (Textual's class attribute, read per render)
        return "●" if self.value else "○"
