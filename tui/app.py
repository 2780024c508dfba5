"""The Textual wizard: hardware → model → workload → recommendation → validate → export.

It holds no advice of its own: every figure and choice comes from the probes, the planner, the
estimate and the validator (``advisor.app.api``). Probing, profiling, planning and validation run in
worker threads, so the interface never freezes. Keyboard first: the footer lists the bindings;
``q`` quits (``ctrl+q`` also while typing), ``ctrl+n`` / ``ctrl+b`` move between the steps.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widgets import (Button, Checkbox, DataTable, Footer, Input, Label, OptionList, ProgressBar, RadioButton,
                             RadioSet, Select, Static, TabbedContent, TabPane)
from textual.widgets.option_list import Option

from advisor.app import api
from advisor.app.api import OPTIONAL_PACKAGES
from advisor.engine.recommendation import Recommendation
from probes.errors import AdvisorError
from probes.gpu_catalog import catalog
from probes.hardware import HardwareProfile
from probes.model import TASKS, ModelProfile, catalog_ids
from tui import widgets

STEPS = ("hardware", "model", "workload", "recommendation", "validate", "export")
NO_SELECTION = getattr(Select, "NULL", None) or Select.BLANK  #: Textual >= 8 names the sentinel NULL


class HardwareProbed(Message):
    """The local probe finished."""

    def __init__(self, hardware: HardwareProfile) -> None:
        super().__init__()
        self.hardware = hardware


class ModelResolved(Message):
    """A model id or path resolved to its profile."""

    def __init__(self, profile: ModelProfile) -> None:
        super().__init__()
        self.profile = profile


class ModelFailed(Message):
    """A model id or path did not resolve (the one-line error the CLI would print)."""

    def __init__(self, text: str, error: str) -> None:
        super().__init__()
        self.text, self.error = text, error


class RecommendationReady(Message):
    """The planner's recommendation for the current question."""

    def __init__(self, recommendation: Recommendation) -> None:
        super().__init__()
        self.recommendation = recommendation


class PlanningFailed(Message):
    """No plan (or a bad input): the one-line error, with what would fit where known."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ValidationProgress(Message):
    """A validator event: a trial started, a step finished, a trial finished."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event


class ValidationDone(Message):
    """The validator returned its report (partial when cancelled), or failed with an error line."""

    def __init__(self, report: Any = None, error: str | None = None) -> None:
        super().__init__()
        self.report, self.error = report, error


class Exported(Message):
    """Files written by the export step."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.paths = paths


class AdvisorApp(App):
    """The advisor wizard. Options are those of ``advisor recommend``; with a model it opens on the
    recommendation. ``hardware`` replaces the local probe (tests and snapshots use it)."""

    CSS_PATH = "advisor.tcss"
    TITLE = "advisor"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
        Binding("ctrl+n", "next_step", "Next", priority=True),
        Binding("ctrl+b", "previous_step", "Back", priority=True),
        Binding("ctrl+r", "recommend", "Recommend", priority=True),
        Binding("ctrl+t", "validate", "Validate", priority=True),
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("escape", "cancel", "Cancel / leave field", show=False),
    ]

    def __init__(self, *, model: str | None = None, task: str | None = None, gpu: str | None = None, nodes: int = 1,
                 seq_len: int | None = None, global_batch_size: int | None = None, objective: str = "speed",
                 out_dir: str = "advisor-config", hardware: HardwareProfile | None = None,
                 interconnect: str | None = None, inter_node_gbps: float | None = None) -> None:
        super().__init__()
        self.options = dict(model=model, task=task, gpu=gpu, nodes=nodes, seq_len=seq_len,
                            global_batch_size=global_batch_size, objective=objective, out_dir=out_dir,
                            interconnect=interconnect, inter_node_gbps=inter_node_gbps)
        self.local_hardware: HardwareProfile | None = hardware
        self.profile: ModelProfile | None = None
        self.recommendation: Recommendation | None = None
        self.report = None
        self.saved: list[Path] = []
        self.explained: str | None = None  #: the setting whose explanation is shown
        self.history: list[Message] = []  #: every wizard message, in order (what tests assert on)
        self._stop = threading.Event()
        self._validating = False

    # ── layout ──────────────────────────────────────────────────────────────
    def compose(self) -> ComposeResult:
        gpu, count = (self.options["gpu"] or "").partition(":")[::2]
        with TabbedContent(initial="hardware", id="wizard"):
            with TabPane("1 Hardware", id="hardware"):
                with VerticalScroll():
                    yield Static("Probing this machine…", id="detected")
                    with RadioSet(id="hw-source"):
                        yield RadioButton("This machine", value=not gpu, id="hw-local")
                        yield RadioButton("A catalog GPU (plan for hardware you do not have)", value=bool(gpu),
                                          id="hw-catalog")
                    yield Input(value=gpu, placeholder="search the catalog: a100, h100, 4090…", id="gpu-search",
                                suggester=SuggestFromList(list(catalog()), case_sensitive=False))
                    yield OptionList(*self._gpu_options(""), id="gpu-list")
                    with Horizontal(classes="row"):
                        yield Label("GPUs per node")
                        yield Input(value=count or "1", type="integer", id="gpu-count")
                        yield Label("nodes")
                        yield Input(value=str(self.options["nodes"]), type="integer", id="nodes")
            with TabPane("2 Model", id="model"):
                with VerticalScroll():
                    yield Input(value=self.options["model"] or "", id="model-input",
                                placeholder="Hub id (gpt2), a folder with config.json, or a config.json path",
                                suggester=SuggestFromList(catalog_ids(), case_sensitive=False))
                    yield Static("Type a model and press Enter; the shipped catalog completes as you type (→).",
                                 id="model-profile")
            with TabPane("3 Workload", id="workload"):
                with VerticalScroll():
                    with Horizontal(classes="row"):
                        yield Label("sequence length")
                        yield Input(value=str(self.options["seq_len"] or ""), type="integer", id="seq-len",
                                    placeholder="default: min(max positions, 1024)")
                    with Horizontal(classes="row"):
                        yield Label("global batch size")
                        yield Input(value=str(self.options["global_batch_size"] or 64), type="integer",
                                    id="global-batch")
                    with Horizontal(classes="row"):
                        yield Label("task head")
                        yield Select([(t, t) for t in TASKS], value=self.options["task"] or NO_SELECTION,
                                     prompt="from the config", id="task")
                    with RadioSet(id="objective"):
                        yield RadioButton("Fastest plan that fits", value=self.options["objective"] != "memory",
                                          id="objective-speed")
                        yield RadioButton("Least memory", value=self.options["objective"] == "memory",
                                          id="objective-memory")
                    yield Static(self._packages_text(), id="packages")
                    yield Button("Recommend (ctrl+r)", id="recommend", variant="primary")
            with TabPane("4 Recommendation", id="recommendation"):
                with VerticalScroll():
                    yield Static("No recommendation yet: choose a model, then Recommend (ctrl+r).", id="rec-summary")
                    yield Static("", id="memory-bar")
                    yield DataTable(id="settings", cursor_type="row", zebra_stripes=True)
                    yield Static("", id="why")
                    yield Static("", id="alternatives")
                    yield Static("", id="warnings")
            with TabPane("5 Validate", id="validate"):
                with VerticalScroll():
                    yield Static("Trial steps of this machine's plan for the model and workload above.",
                                 id="validate-where")
                    with Horizontal(classes="row"):
                        yield Label("timed steps")
                        yield Input(value="10", type="integer", id="trial-steps")
                        yield Checkbox("compare with the fp32 baseline", id="compare")
                    with Horizontal(classes="row"):
                        yield Button("Start (ctrl+t)", id="validate-start", variant="primary")
                        yield Button("Cancel (esc)", id="validate-cancel", disabled=True)
                    yield ProgressBar(id="validate-progress", show_eta=False)
                    yield Static("", id="validate-live")
                    yield Static("", id="validate-result")
            with TabPane("6 Export", id="export"):
                with VerticalScroll():
                    with Horizontal(classes="row"):
                        yield Label("folder")
                        yield Input(value=self.options["out_dir"], id="out-dir")
                    yield Button("Save (ctrl+s)", id="save", variant="primary")
                    yield Static("Saves recommendation.json, the validation report when there is one, and the "
                                 "configs: training_args.json, accelerate_config.yaml, ds_config.json (ZeRO), "
                                 "launch.sh.", id="export-result")
        yield Footer()

    @staticmethod
    def _gpu_options(text: str) -> list[Option]:
        needle = text.strip().lower().partition(":")[0]
        return [Option(f"{e.id:<15} {e.name} · {e.memory_gib:g} GiB · {'bf16' if e.peak_tflops.bf16 else 'fp16'}",
                       id=e.id) for e in catalog().values() if needle in e.id or needle in e.name.lower()]

    @staticmethod
    def _packages_text() -> str:
        found = {name: importlib.util.find_spec(name) is not None for name in OPTIONAL_PACKAGES}
        return "Packages that widen the choice: " + ", ".join(
            f"{name} {'found' if ok else 'missing'}" for name, ok in found.items())

    # ── start ───────────────────────────────────────────────────────────────
    def on_mount(self) -> None:
        self.query_one("#settings", DataTable).add_columns("setting", "value")
        if self.local_hardware is None:
            self.probe_local()
        else:
            self.post_message(HardwareProbed(self.local_hardware))
        if self.options["model"]:
            self.query_one(TabbedContent).active = "recommendation"
            self.resolve_model(self.options["model"], self.options["task"], then_recommend=True)

    def _record(self, message: Message) -> None:
        self.history.append(message)

    @work(thread=True, exclusive=True, group="probe")
    def probe_local(self) -> None:
        self.post_message(HardwareProbed(api.probe_hardware()))

    def on_hardware_probed(self, message: HardwareProbed) -> None:
        self._record(message)
        self.local_hardware = message.hardware
        self.query_one("#detected", Static).update(widgets.hardware_summary(message.hardware))

    # ── step 1: hardware ────────────────────────────────────────────────────
    @on(Input.Changed, "#gpu-search")
    def _filter_gpus(self, event: Input.Changed) -> None:
        options = self.query_one("#gpu-list", OptionList)
        options.clear_options()
        options.add_options(self._gpu_options(event.value))
        if event.value.strip():
            self.query_one("#hw-catalog", RadioButton).value = True

    @on(OptionList.OptionSelected, "#gpu-list")
    def _pick_gpu(self, event: OptionList.OptionSelected) -> None:
        self.query_one("#gpu-search", Input).value = event.option.id or ""
        self.query_one("#hw-catalog", RadioButton).value = True

    def gpu_choice(self) -> tuple[str | None, int]:
        """The hardware question: (catalog 'NAME:COUNT' or None for this machine, nodes)."""
        nodes = _int(self.query_one("#nodes", Input).value, 1)
        if not self.query_one("#hw-catalog", RadioButton).value:
            return None, nodes
        name = self.query_one("#gpu-search", Input).value.strip().partition(":")[0]
        if not name:
            return None, nodes
        return f"{name}:{_int(self.query_one('#gpu-count', Input).value, 1)}", nodes

    # ── step 2: model ───────────────────────────────────────────────────────
    @on(Input.Submitted, "#model-input")
    def _model_submitted(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.resolve_model(event.value.strip(), self._task_choice())

    @work(thread=True, exclusive=True, group="model")
    def resolve_model(self, text: str, task: str | None = None, then_recommend: bool = False) -> None:
        try:
            profile = api.profile_model(text, task)
        except AdvisorError as err:
            self.post_message(ModelFailed(text, str(err)))
            return
        self.post_message(ModelResolved(profile))
        if then_recommend:
            self.call_from_thread(self.action_recommend)

    def on_model_resolved(self, message: ModelResolved) -> None:
        self._record(message)
        self.profile = message.profile
        box = self.query_one("#model-profile", Static)
        box.remove_class("error")
        box.update(widgets.profile_summary(message.profile))

    def on_model_failed(self, message: ModelFailed) -> None:
        self._record(message)
        self.profile = None
        box = self.query_one("#model-profile", Static)
        box.add_class("error")
        box.update(f"✗ {message.error}")

    # ── step 3: workload ────────────────────────────────────────────────────
    def _task_choice(self) -> str | None:
        value = self.query_one("#task", Select).value
        return value if isinstance(value, str) else None

    def workload_choice(self) -> dict[str, Any]:
        """The workload question: sequence length, global batch size, task, objective."""
        return dict(seq_len=_int(self.query_one("#seq-len", Input).value, None),
                    global_batch_size=_int(self.query_one("#global-batch", Input).value, None),
                    task=self._task_choice(),
                    objective="memory" if self.query_one("#objective-memory", RadioButton).value else "speed")

    @on(Button.Pressed, "#recommend")
    def _recommend_pressed(self) -> None:
        self.action_recommend()

    # ── step 4: recommendation ──────────────────────────────────────────────
    def action_recommend(self) -> None:
        text = self.query_one("#model-input", Input).value.strip()
        if not text:
            self.query_one(TabbedContent).active = "model"
            self.notify("Choose a model first", severity="warning")
            return
        gpu, nodes = self.gpu_choice()
        self.query_one("#rec-summary", Static).update("Planning…")
        self.query_one(TabbedContent).active = "recommendation"
        self.plan(text, gpu, nodes, self.workload_choice())

    @work(thread=True, exclusive=True, group="plan")
    def plan(self, text: str, gpu: str | None, nodes: int, workload: dict[str, Any]) -> None:
        try:
            hardware = self.local_hardware if gpu is None and nodes == 1 else None
            model = self.profile if self.profile is not None and self.profile.id == text and (
                workload["task"] in (None, self.profile.task)) else text
            network = {} if hardware is not None else dict(interconnect=self.options["interconnect"],
                                                           inter_node_gbps=self.options["inter_node_gbps"])
            rec = api.recommend(model, gpu=gpu, nodes=nodes, hardware=hardware, **workload, **network)
        except AdvisorError as err:
            self.post_message(PlanningFailed(str(err)))
            return
        self.post_message(RecommendationReady(rec))

    def on_recommendation_ready(self, message: RecommendationReady) -> None:
        self._record(message)
        rec = self.recommendation = message.recommendation
        self.profile = rec.model
        self.query_one("#model-profile", Static).update(widgets.profile_summary(rec.model))
        self.query_one("#rec-summary", Static).update(widgets.plan_line(rec))
        table = self.query_one("#settings", DataTable)
        table.clear()
        for name, decision in rec.settings.items():
            table.add_row(name, widgets.value_text(decision.value), key=name)
        self.query_one("#memory-bar", Static).update(widgets.memory_bar(rec.memory))
        self.query_one("#alternatives", Static).update(widgets.alternatives_table(rec))
        self.query_one("#warnings", Static).update(
            "\n".join(f"⚠ {w.message} [{w.rule_id}]" for w in rec.warnings))
        self._explain(next(iter(rec.settings)))
        table.focus(scroll_visible=False)  # keep the plan line and the memory bar in view

    def on_planning_failed(self, message: PlanningFailed) -> None:
        self._record(message)
        self.recommendation = None
        self.query_one("#settings", DataTable).clear()
        for box in ("#why", "#memory-bar", "#alternatives", "#warnings"):
            self.query_one(box, Static).update("")
        summary = self.query_one("#rec-summary", Static)
        summary.add_class("error")
        summary.update(f"✗ {message.error}")

    @on(DataTable.RowHighlighted, "#settings")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._explain(event.row_key.value)

    def _explain(self, name: str) -> None:
        if self.recommendation is not None and name in self.recommendation.settings:
            self.explained = name
            self.query_one("#rec-summary", Static).remove_class("error")
            self.query_one("#why", Static).update(widgets.explanation(name, self.recommendation.settings[name]))

    # ── step 5: validate ────────────────────────────────────────────────────
    def action_validate(self) -> None:
        if self._validating:
            return
        text = self.query_one("#model-input", Input).value.strip()
        if not text:
            self.query_one(TabbedContent).active = "model"
            self.notify("Choose a model first", severity="warning")
            return
        self.query_one(TabbedContent).active = "validate"
        self._validating = True
        self._stop.clear()
        self.query_one("#validate-start", Button).disabled = True
        self.query_one("#validate-cancel", Button).disabled = False
        self.query_one("#validate-result", Static).update("")
        self.query_one("#validate-live", Static).update("Building the model…")
        workload = self.workload_choice()
        workload.pop("objective")
        self.run_validation(text, workload, _int(self.query_one("#trial-steps", Input).value, 10),
                            self.query_one("#compare", Checkbox).value)

    @work(thread=True, exclusive=True, group="validate")
    def run_validation(self, text: str, workload: dict[str, Any], steps: int, compare: bool) -> None:
        try:
            report = api.validate(text, steps=steps, compare=compare, stop=self._stop,
                                  progress=lambda event: self.post_message(ValidationProgress(event)), **workload)
        except AdvisorError as err:
            self.post_message(ValidationDone(error=str(err)))
            return
        except Exception as err:  # a bug must not take the wizard down with it
            self.post_message(ValidationDone(error=f"internal error: {type(err).__name__}: {err}"))
            return
        self.post_message(ValidationDone(report=report))

    @on(Button.Pressed, "#validate-start")
    def _validate_pressed(self) -> None:
        self.action_validate()

    @on(Button.Pressed, "#validate-cancel")
    def _cancel_pressed(self) -> None:
        self.action_cancel()

    def on_validation_progress(self, message: ValidationProgress) -> None:
        from advisor.measure.trial import StepUpdate
        from advisor.measure.validation import Trial, TrialStarted, describe

        self._record(message)
        event, bar, live = message.event, self.query_one("#validate-progress", ProgressBar), \
            self.query_one("#validate-live", Static)
        if isinstance(event, TrialStarted):
            bar.update(total=event.total_steps, progress=0)
            live.update(f"Trial {event.index} ({event.role}): {describe(event.plan)}; predicted "
                        f"{event.predicted_step_time_s:.3g} s/step")
        elif isinstance(event, StepUpdate):
            bar.update(total=event.total, progress=event.step)
            live.update(event.describe())
        elif isinstance(event, Trial):
            live.update(f"Trial finished: {event.status}" + (f" ({event.message})" if event.message else ""))

    def on_validation_done(self, message: ValidationDone) -> None:
        from advisor.app.report import validation_tables

        self._record(message)
        self._validating = False
        self.query_one("#validate-start", Button).disabled = False
        self.query_one("#validate-cancel", Button).disabled = True
        result = self.query_one("#validate-result", Static)
        if message.error:
            result.add_class("error")
            result.update(f"✗ {message.error}")
            return
        result.remove_class("error")
        self.report = message.report
        result.update(validation_tables(message.report))
        self.query_one("#validate-live", Static).update(
            "Cancelled: the partial report is kept." if message.report.interrupted else "Done.")

    def action_cancel(self) -> None:
        if self._validating:
            self._stop.set()
            self.query_one("#validate-live", Static).update("Stopping at the next step boundary…")
        elif isinstance(self.focused, Input):
            self.set_focus(None)

    # ── step 6: export ──────────────────────────────────────────────────────
    @on(Button.Pressed, "#save")
    def _save_pressed(self) -> None:
        self.action_save()

    def action_save(self) -> None:
        from advisor.app.emit import emit
        from advisor.app.files import write_atomic

        self.query_one(TabbedContent).active = "export"
        box = self.query_one("#export-result", Static)
        if self.recommendation is None:
            box.update("Nothing to save yet: make a recommendation first (ctrl+r).")
            return
        folder = Path(self.query_one("#out-dir", Input).value.strip() or ".")
        try:
            paths = emit(self.recommendation, ["all"], folder)
            paths.insert(0, write_atomic(folder / "recommendation.json",
                                         self.recommendation.model_dump_json(indent=2) + "\n"))
            if self.report is not None:
                paths.insert(1, write_atomic(folder / "validation.json", self.report.model_dump_json(indent=2) + "\n"))
        except AdvisorError as err:
            box.add_class("error")
            box.update(f"✗ {err}")
            return
        box.remove_class("error")
        self.saved = paths
        self.post_message(Exported(paths))
        box.update("Saved:\n" + "\n".join(f"  {p}" for p in paths))

    def on_exported(self, message: Exported) -> None:
        self._record(message)

    # ── navigation ──────────────────────────────────────────────────────────
    @property
    def step(self) -> str:
        """The step shown (a TabPane id)."""
        return self.query_one(TabbedContent).active

    def _go(self, delta: int) -> None:
        index = max(0, min(len(STEPS) - 1, STEPS.index(self.step) + delta))
        self.query_one(TabbedContent).active = STEPS[index]

    def action_next_step(self) -> None:
        if self.step == "model" and self.query_one("#model-input", Input).value.strip() and self.profile is None:
            self.resolve_model(self.query_one("#model-input", Input).value.strip(), self._task_choice())
        if self.step == "workload":
            self.action_recommend()
            return
        self._go(+1)

    def action_previous_step(self) -> None:
        self._go(-1)


def _int(text: str, default):
    try:
        value = int(text)
    except (TypeError, ValueError):
        return default
    return value if value > 0 else default


def run(**options: Any) -> int:
    """Run the wizard (``advisor tui``); the exit code."""
    AdvisorApp(**options).run()
    return 0
