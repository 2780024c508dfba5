"""Human-readable reports (rich tables) of the engine's models. Printing only: no advice here."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape  # a model id or path is text, not markup: "a[/b]" is a folder name
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from advisor.core.text import MAX_LINE, shown  # and its control characters are escaped (a folder named "\x1b[2J")

from advisor.app.charts import memory_bar, memory_key

from advisor.engine.memory import MemoryEstimate, Verdict
from advisor.engine.paged import evicted_bytes, paging_seconds
from advisor.core.dimensions import PLAN_LINE
from advisor.core.units import GIB
from advisor.engine.recommendation import Recommendation
from advisor.engine.speed import SpeedEstimate
from probes.model import ModelProfile
from rules import RuleInfo



def gib(n: int | float | None) -> str:
    """Bytes as GiB for display."""
    return "—" if n is None else f"{n / GIB:,.2f} GiB"


def band(relative: float | None) -> str:
    """An uncertainty band for display (`` ± 3 %``; nothing without one)."""
    return "" if relative is None else f" ± {relative:.0%}".replace("%", " %")


def value_text(v) -> str:
    """A setting's value for display: booleans lower-case ('true'), the rest as str."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def model_table(m: ModelProfile) -> Table:
    """The model profile as a two-column table."""
    t = Table(title=f"Model {escape(shown(m.id))} ({m.source})", title_justify="left", show_header=False)
    t.add_column("fact", style="bold")
    t.add_column("value")
    rows = [
        ("family", f"{m.family} ({m.model_type})"),
        ("task head", f"{m.task} (supports: {', '.join(m.supported_tasks)})"),
        ("parameters", f"{m.num_parameters:,} ({m.parameter_count_method}; {m.matmul_parameters:,} in matmuls)"),
        *_moe_rows(m),
        ("layers", f"{m.num_layers}" + (f" ({m.encoder_layers} encoder + {m.decoder_layers} decoder)"
                                         if m.family == "encoder-decoder" else "")),
        ("hidden size", str(m.hidden_size)),
        ("attention heads", f"{m.num_attention_heads} ({m.num_key_value_heads} KV heads, head dim {m.head_dim})"),
        ("FFN size", f"{m.ffn_size}" + (" (gated)" if m.gated_mlp else "")
         + (" per token, over its experts" if m.num_experts else "")),
        ("vocabulary", f"{m.vocab_size:,}" + (" (tied embeddings)" if m.tied_embeddings else "")),
        ("max positions", str(m.max_position_embeddings) if m.max_position_embeddings else "unbounded"),
        ("checkpoint dtype", m.checkpoint_dtype + (" (pretrained in bf16)" if m.pretrained_in_bf16 else "")),
        *([("quantized weights", f"{m.quantization.label}"
            + (" with double quantization" if m.quantization.double_quant else "")
            + " (quantization_config): " + ("trains QLoRA adapters only" if m.quantization.bitsandbytes_4bit
                                            else "not planned; give the original 16-bit model"))]
          if m.quantization else []),
        ("gradient checkpointing", "supported" if m.supports_gradient_checkpointing else "not supported"),
        ("attention kernels", ", ".join(m.attention_kernels) + " (transformers' implementations)"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    for note in m.notes:
        t.add_row("note", note, style="dim")
    return t


def _moe_rows(m: ModelProfile) -> list[tuple[str, str]]:
    """The experts and the parameters a token uses, for a mixture of experts (none for a dense model)."""
    if not m.num_experts:
        return []
    shared = f" + {m.shared_experts} shared" if m.shared_experts else ""
    experts = f"{m.num_experts} routed, top-{m.experts_per_token}{shared}"
    capacity = f"capacity factor {m.capacity_factor:g}" if m.capacity_factor else "dropless"
    return [("experts", f"{experts}; MoE in {m.moe_layers} of {m.num_layers} blocks; {capacity}"),
            ("active parameters", f"{m.active_parameters:,} per token ({m.active_matmul_parameters:,} in matmuls)")]


#: Each memory verdict (:attr:`MemoryEstimate.verdict`) in words and colour: a tight plan says what it lacks.
VERDICTS = {Verdict.FITS: ("fits", "green"), Verdict.TIGHT: ("tight: validate first", "yellow"),
            Verdict.NO_FIT: ("does not fit", "red")}


def memory_table(mem: MemoryEstimate, pcie_generation: int | None = None) -> Table:
    """Memory components against capacity (paged optimizer states: where they live, under it)."""
    t = Table(title="Memory per device", title_justify="left")
    t.add_column("component")
    t.add_column("bytes", justify="right")
    t.add_column("share", justify="right")
    comps = mem.components.model_dump()
    total = sum(comps.values()) or 1
    for name, value in comps.items():
        t.add_row(name.removesuffix("_bytes").replace("_", " "), gib(value), f"{value / total:.0%}")
    t.add_row("peak (live tensors)", gib(mem.peak_bytes) + band(mem.band), "", style="bold")
    t.add_row("device in use (NVML)", gib(mem.device_bytes) + band(mem.band), "", style="bold")
    if mem.paged_bytes:  # bitsandbytes' paged states (advisor.engine.paged)
        t.add_row("of which paged", gib(mem.paged_bytes), "", style="dim")
        t.caption, t.caption_justify = paged_words(mem, pcie_generation), "left"
    words, colour = VERDICTS[mem.device_verdict if mem.host_bytes else mem.verdict]
    t.add_row("usable of capacity", f"{gib(mem.usable_bytes)} of {gib(mem.capacity_bytes)}", Text(words, style=colour))
    if mem.host_bytes:  # an offload: the host's RAM is the other half of the verdict
        t.add_row("host RAM (offload)", gib(mem.host_bytes), "", style="bold")
        usable = mem.host_usable_bytes
        if usable is None:
            t.add_row("usable host RAM", "unknown", Text("unchecked: --host-memory SIZE", style="yellow"))
        else:
            words, colour = VERDICTS[mem.host_verdict]
            t.add_row("usable host RAM", f"{gib(usable)} of {gib(mem.host_capacity_bytes)}", Text(words, style=colour))
    return t


def speed_table(speed: SpeedEstimate) -> Table:
    """Estimated speed."""
    t = Table(title="Estimated speed", title_justify="left", show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value", justify="right")
    t.add_row("step time", f"{speed.step_time_s:.3f} s{band(speed.step_time_band)}")
    t.add_row("throughput", f"{speed.samples_per_s:,.1f} samples/s, {speed.tokens_per_s:,.0f} tokens/s")
    t.add_row("FLOPs per step", f"{speed.flops_per_step:.3e} FLOP")
    t.add_row("MFU", f"{speed.mfu:.0%} of {speed.peak_flops_per_s / 1e12:,.1f} TFLOP/s per device")
    if speed.communication_s:
        t.add_row("communication", f"{speed.communication_s:.3f} s per step (exposed)")
    if speed.local_calibration:
        t.add_row("calibrated", speed.local_calibration.describe())
    return t


#: The height of the terminal the plan card is made for (rows): the card fits 80 x 24.
CARD_LINES = 24
#: Words in an alternative's reason that say it was weighed (figures, a tie) rather than refused by a rule.
_WEIGHED = ("tokens/s", "GiB", "as fast")


def _where(rec: Recommendation) -> str:
    hw = rec.hardware
    nodes = f" × {hw.nodes} nodes" if hw.nodes > 1 else ""
    return f"{hw.num_gpus // max(hw.nodes, 1)} × {hw.gpu.name}{nodes}" if hw.gpu else "the CPU (no NVIDIA GPU found)"


def _decided(decision) -> bool:
    """Whether a setting's row carries a decision: some alternative was weighed (figures or a tie); a setting
    whose alternatives the rules all refused has one allowed value, and folds into the card's last row."""
    return any(any(w in a.reason for w in _WEIGHED) for a in decision.alternatives)


#: What a fallback's rationale says when the plan fits without it (:mod:`advisor.engine.recommendation`): the card
#: folds those settings into one ``spared`` row of the values not needed.
_SPARED = " fits without "
#: Settings the plan line already shows (by value, or by its absence): not repeated in the card's folded row.
_IN_PLAN_LINE = PLAN_LINE


def _line(*parts) -> Text:
    """One card line: cut with an ellipsis at the console's width rather than wrapped."""
    return Text.assemble(*parts, no_wrap=True, overflow="ellipsis")


def plan_card(rec: Recommendation, width: int) -> Group:
    """The recommendation at a glance, for an 80 × 24 terminal: the plan on one line, each decided setting as
    ``name = value — reason`` on one line, the fallbacks the plan fits without in one row, the settings the rules
    left one value folded into one row (each on two lines, or one when the decided settings leave no room for a
    warning), memory with a bar split by component and its key (:mod:`advisor.app.charts`), speed, the first warnings (as many as the 24 lines leave room for). ``--explain`` prints
    :func:`print_recommendation`'s full report."""
    m, sp, mem = rec.model, rec.speed, rec.memory
    lines: list[Text] = [Text.assemble((shown(m.id), "bold"), f" ({m.num_parameters / 1e6:,.1f}M, {m.task}) on ",
                                       (_where(rec) if rec.hardware.gpu else "the CPU", "bold"),
                                       f", seq-len {rec.workload.seq_len} × batch {rec.workload.global_batch_size}")]
    if rec.hardware.gpu is None:  # a CPU plan, often minutes a step: said first, with what a GPU would give
        lines += [Text(idea, style="yellow") for idea in rec.suggestions] or [_line((
            "no NVIDIA GPU here: plan for one with --gpu NAME[:COUNT] (advisor probe --gpu list)", "yellow"))]
    lines += [_line((f"note: {note}", "dim")) for note in m.notes]
    lines.append(Text.assemble(("plan   ", "bold"), (rec.plan.describe(), "cyan")))
    if rec.estimate_only:
        lines.append(_line(("estimate only: ", "yellow"), rec.estimate_only))
    if rec.hand_off:
        lines.append(_line(("hand-off: ", "cyan"), rec.hand_off))
    decided = {n: d for n, d in rec.settings.items() if _decided(d)}
    spared = {n: d.rationale.partition(_SPARED)[2] for n, d in decided.items() if _SPARED in d.rationale}
    pad = max((len(n) for n in decided if n not in spared), default=0)
    for name, d in decided.items():
        if name not in spared:
            lines.append(_line(f"{name:<{pad}} = ", (value_text(d.value), "cyan"), (f" — {d.rationale}", "dim")))
    if rec.gains:
        lines.append(_folded([f"{g.package} ({_gain_words(g, rec)})" for g in rec.gains], width, most=1,
                             label="gain   ", lead="install "))
    fixed = [f"{n}={value_text(d.value)}" for n, d in rec.settings.items() if n not in decided and n not in _IN_PLAN_LINE]

    def folded(most: int) -> list[Text]:  # the spared and also rows, each on at most ``most`` lines
        rows = [(list(spared.values()), "spared ", "not needed to fit: "), (fixed, "also   ", "")]
        return [_folded(items, width, most, label=label, lead=lead) for items, label, lead in rows if items]

    comm = f" · comm. {sp.communication_s:.3f} s" if sp.communication_s else ""
    figures = [*_memory_lines(mem, width),
               _line(("speed  ", "bold"), f"{sp.step_time_s:.3f} s/step{band(sp.step_time_band)} · {sp.tokens_per_s:,.0f} tokens/s · "
                     f"MFU {sp.mfu:.0%} of {sp.peak_flops_per_s / 1e12:,.1f} TFLOP/s{comm}")]
    if mem.host_bytes and rec.hardware.host_memory_assumed:  # an offload checked against the catalog's server
        figures.append(_line(("host   ", "bold"), f"{gib(mem.host_bytes)} in RAM of {gib(mem.host_capacity_bytes or 0)} "
                             "per node assumed (the catalog's typical server; --host-memory SIZE for yours)"))
    if mem.paged_bytes:  # where a paged optimizer's states live
        figures.append(_line(("paged  ", "bold"), paged_words(mem, getattr(rec.hardware.gpu, "pcie_generation", None))))
    if sp.local_calibration:  # the runs measured on this machine (advisor runs)
        figures.append(_line("       ", (sp.local_calibration.describe(), "green")))
    footer = [_line(("--explain: the reasons, rule ids, sources, every alternative · --json: all of it", "dim"))]
    for most in (2, 1):  # many decided settings: the folded rows give up their second line to keep 24
        card = [*lines, *folded(most), *figures]
        used = sum(_height(part, width) for part in (*card, *footer))
        if used + bool(rec.warnings) <= CARD_LINES:
            break
    room = max(1, CARD_LINES - used)
    listed = rec.warnings if len(rec.warnings) <= room else rec.warnings[:room - 1]
    card += [_line(("! ", "yellow"), w.message) for w in listed]
    if len(listed) < len(rec.warnings):
        card.append(_line((f"! … {len(rec.warnings) - len(listed)} more warning(s): --explain", "yellow")))
    return Group(*card, *footer)


def _memory_lines(mem: MemoryEstimate, width: int) -> list[Text]:
    """The card's memory: the verdict first (a narrow terminal crops the line's end) and the figures, the bar split
    by component (:func:`advisor.app.charts.memory_bar`) with the device's share, and the bar's key in words."""
    share = mem.device_bytes / mem.capacity_bytes if mem.capacity_bytes else 0.0
    bar, parts = memory_bar(mem, max(10, min(width, 100) - 13))
    fits = VERDICTS[mem.verdict]
    return [_line(("memory ", "bold"), fits, f" · peak {gib(mem.peak_bytes)}{band(mem.band)} · device "
                  f"{mem.device_bytes / GIB:,.2f} of {gib(mem.capacity_bytes)} ({mem.usable_bytes / GIB:,.2f} usable)"),
            Text.assemble("       ", bar, (f" {share:.0%}", fits[1])), memory_key(parts, width)]


def paged_words(mem: MemoryEstimate, pcie_generation: int | None) -> str:
    """Where a paged optimizer's states live (:mod:`advisor.engine.paged`) and what paging them costs a step."""
    evicted = evicted_bytes(mem.device_bytes, mem.paged_bytes, mem.capacity_bytes)
    where = (f", {gib(evicted)} in CPU RAM: paging ≥ {paging_seconds(evicted, pcie_generation):.2f} s/step (PCIe "
             f"{pcie_generation or 4})" if evicted else " (bitsandbytes), on the GPU while it has room")
    return f"{gib(mem.paged_bytes)} optimizer states in CUDA unified memory{where}"


def _gain_words(gain, rec: Recommendation) -> str:
    """What a :class:`~advisor.engine.decisions.PackageGain` brings against the chosen plan, in words: the method
    when it changes (a faster kernel can make LoRA fit where QLoRA was needed), the speed-up and the memory."""
    method = f"{gain.plan.method}: " if gain.plan.method != rec.plan.method else ""
    words = f"{method}{(gain.speedup - 1) * 100:.0f} % faster"
    more = (gain.device_bytes - rec.memory.device_bytes) / GIB
    return words + (f", {abs(more):.1f} GiB {'more' if more > 0 else 'less'}" if abs(more) >= 0.05 else "")


def _folded(items: list[str], width: int, most: int = 2, label: str = "also   ", lead: str = "") -> Text:
    """A card row of ``items`` on at most ``most`` lines (the rest: --explain): ``also``, the settings without a
    decision; ``spared``, the fallbacks the plan fits without."""
    for n in range(len(items), 0, -1):
        rest = f", … {len(items) - n} more (--explain)" if n < len(items) else ""
        row = Text.assemble((label, "bold"), lead + ", ".join(items[:n]) + rest)
        if _height(row, width) <= most:
            return row
    return row


def _height(renderable, width: int) -> int:
    """Lines a renderable takes at ``width`` columns."""
    console = Console(width=width, color_system=None)
    return len(console.render_lines(renderable, console.options, pad=False))


def print_recommendation(rec: Recommendation, console: Console, *, explain: bool = False) -> None:
    """The recommendation: the plan card (:func:`plan_card`), or with ``explain`` the full report: every setting
    with its reasons, rule ids, numbered sources and every alternative that lost, the memory components, the
    speed, every warning and the sources, each printed once."""
    if not explain:
        console.print(plan_card(rec, console.width), highlight=False)
        return
    hw = rec.hardware
    console.print(Panel.fit(f"[bold]{escape(shown(rec.model.id))}[/] ({rec.model.num_parameters / 1e6:,.1f}M "
                            "parameters, "
                            f"{rec.model.task}) on [bold]{_where(rec)}[/]\nseq-len {rec.workload.seq_len}, "
                            f"global batch {rec.workload.global_batch_size}", title="advisor recommend"))
    for note in rec.model.notes:
        console.print(f"[dim]note: {escape(shown(note, MAX_LINE))}[/]")
    if hw.gpu is None:
        console.print("[yellow]No NVIDIA GPU on this machine: this plan trains on the CPU. To plan for a GPU you "
                      "do not have, add --gpu NAME[:COUNT], e.g. --gpu a100-80gb or --gpu t4:2.[/]")
    if rec.estimate_only:
        console.print(Text(f"estimate only: {rec.estimate_only}", style="yellow"))
    if rec.hand_off:
        console.print(Text(f"hand-off: {rec.hand_off}", style="cyan"))
    numbers: dict[str, int] = {}
    titles: dict[str, str] = {}
    for setting in rec.settings.values():
        for s in setting.sources:
            numbers.setdefault(s.url, len(numbers) + 1)
            titles.setdefault(s.url, s.title)
    t = Table(title="Settings and why", title_justify="left", show_lines=True)
    t.add_column("setting", style="bold")
    t.add_column("value", style="cyan")
    t.add_column("why")
    t.add_column("alternatives that lost")
    for name, s in rec.settings.items():
        refs = "".join(f"[{numbers[src.url]}]" for src in s.sources)
        why = Text(s.rationale, overflow="fold")
        if s.rule_ids or refs:
            why.append(f"\n{', '.join(s.rule_ids)} {refs}".rstrip(), style="dim")
        alts = Text("\n".join(f"{value_text(a.value)}: {a.reason}" for a in s.alternatives), overflow="fold")
        t.add_row(name, value_text(s.value), why, alts)
    console.print(t)
    console.print(memory_table(rec.memory, getattr(rec.hardware.gpu, "pcie_generation", None)))
    console.print(speed_table(rec.speed))
    if rec.warnings:
        w = Table(title="Warnings", title_justify="left", show_header=False)
        w.add_column("rule", style="yellow")
        w.add_column("message")
        for item in rec.warnings:
            w.add_row(item.rule_id, item.message)
        console.print(w)
    for idea in rec.suggestions:
        console.print(Text(idea, style="yellow"))
    for gain in rec.gains:
        console.print(Text(f"install {gain.package} ({gain.install}): {gain.setting}={value_text(gain.value)}, "
                           f"{_gain_words(gain, rec)}: {gain.plan.describe()}", style="yellow"))
    console.print(Text("Sources", style="bold"))
    for url, n in numbers.items():
        console.print(Text(f"[{n}] {titles[url]} <{url}>", style="dim"))


def rules_table(rules: list[RuleInfo]) -> Table:
    """The knowledge base."""
    t = Table(title=f"{len(rules)} rules", title_justify="left", show_lines=True)
    t.add_column("id", style="bold")
    t.add_column("title")
    t.add_column("sources")
    for r in rules:
        t.add_row(r.id, r.title, "\n".join(f"{s.title}{f' — {s.section}' if s.section else ''}\n{s.url}"
                                           for s in r.sources))
    return t


def _err(x: float | None) -> str:
    return "" if x is None else f" ({x:+.0%})"


def validation_tables(report) -> Group:
    """A validation report: the device, every trial measured beside predicted, the verdict, the
    comparison with the baseline, the warnings. ``report`` is an ``advisor.measure.validation.ValidationReport``."""

    d = report.device
    limit = f", held to {gib(d.memory_limit_bytes)}" if d.memory_limit_bytes else ""
    head = Text.assemble(("Validation ", "bold"), f"of {report.model} ({report.task}) on {d.name} "
                         f"[{d.type}, {gib(d.capacity_bytes)}{limit}], seq-len {report.workload.seq_len}, "
                         f"global batch {report.workload.global_batch_size}, {report.warmup_steps} warm-up + "
                         f"{report.steps} timed steps per trial")
    t = Table(title="Trials: measured (prediction error)", title_justify="left")
    for col in ("#", "role", "plan", "status", "peak memory", "predicted", "step time", "predicted", "tokens/s",
                "MFU"):
        t.add_column(col, justify="right" if col in ("#", "tokens/s", "MFU") else "left")
    for i, trial in enumerate(report.trials, 1):
        m, p, e = trial.measured, trial.predicted, trial.error
        status = trial.status if trial.status == "ok" else f"[red]{trial.status}[/]"
        t.add_row(str(i), trial.role, trial.plan.describe(), status,
                  gib(m.peak_bytes) + _err(e.peak_bytes if e else None) if m and m.peak_bytes else "—",
                  gib(p.memory.peak_bytes),
                  f"{m.step_time_s:.3f} s" + _err(e.step_time_s if e else None) if m and m.step_time_s else "—",
                  f"{p.speed.step_time_s:.3f} s",
                  f"{m.tokens_per_s:,.0f}" if m and m.tokens_per_s else "—",
                  f"{m.mfu:.1%}" if m and m.mfu is not None else "—")
    parts = [head, t]
    for i, trial in enumerate(report.trials, 1):
        m = trial.measured
        if m is not None and m.ranks:
            ranks = "; ".join(f"rank {r.rank}: {gib(r.peak_bytes)}"
                              + (f", {r.step_time_s:.3f} s/step" if r.step_time_s else "") for r in m.ranks)
            share = f"; gradient sync {m.sync_share:.0%} of a micro-batch" if m.sync_share is not None else ""
            parts.append(Text(f"  {i}. per rank: {ranks}{share}", style="dim"))
    for i, trial in enumerate(report.trials, 1):
        if trial.message or trial.role != "plan":
            parts.append(Text(f"  {i}. {trial.reason}" + (f" → {trial.message}" if trial.message else ""),
                              style="dim"))
    style = {"confirmed": "bold green", "corrected": "bold yellow"}.get(report.verdict, "bold red")
    verdict = Text.assemble(("Verdict: ", "bold"), (report.verdict, style))
    if report.confirmed_plan is not None:
        verdict.append(f" — {report.confirmed_plan.describe()}")
    if report.interrupted:
        verdict.append(" (interrupted: partial report)", style="yellow")
    parts.append(verdict)
    c = report.comparison
    if c is not None:
        if c.same_as_plan:
            parts.append(Text("The confirmed plan is the documents' baseline (fp32, no checkpointing, AdamW): "
                              "nothing to compare"))
        elif c.speedup is not None:
            parts.append(Text(f"Against the baseline ({c.baseline_plan.describe()}): {c.speedup:.2f}x the speed, "
                              f"{gib(c.memory_saved_bytes)} less peak memory"))
        else:
            parts.append(Text(f"Baseline ({c.baseline_plan.describe()}): {c.baseline_status}; no comparison"))
    for w in report.warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    return Group(*parts)
