"""Step 4, recommendation: the plan line, the memory bar, the settings (the highlighted one explains
itself), the next best plans and the warnings. Planning runs in a worker."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static, TabPane

from advisor.app import api
from advisor.engine.recommendation import Recommendation
from advisor.core.errors import AdvisorError
from probes.hardware import HardwareProfile
from probes.model import ModelProfile
from tui import widgets
from tui.messages import PlanningFailed, RecommendationReady


class RecommendationStep(TabPane):
    """The answer; :meth:`plan` posts :class:`RecommendationReady` or :class:`PlanningFailed`.
    ``explained`` is the setting whose explanation is shown."""

    STEP = "recommendation"

    def __init__(self) -> None:
        super().__init__("4 Recommendation", id=self.STEP)
        self.shown: Recommendation | None = None  #: the recommendation on the screen
        self.explained: str | None = None  #: the setting whose explanation is shown

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("No recommendation yet: choose a model, then Recommend (ctrl+r).", id="rec-summary")
            yield Static("", id="memory-bar")
            yield DataTable(id="settings", cursor_type="row", zebra_stripes=True)
            yield Static("", id="why")
            yield Static("", id="alternatives")
            yield Static("", id="warnings")

    def on_mount(self) -> None:
        """Give the settings table its columns."""
        self.query_one("#settings", DataTable).add_columns("setting", "value")

    @work(thread=True, exclusive=True, group="plan")
    def plan(
        self,
        model: str | ModelProfile,
        *,
        gpu: str | None,
        nodes: int,
        hardware: HardwareProfile | None,
        workload: dict[str, Any],
        network: dict[str, Any],
    ) -> None:
        """Plan in a worker (the keywords of :func:`advisor.app.api.recommend`)."""
        try:
            rec = api.recommend(model, gpu=gpu, nodes=nodes, hardware=hardware, **workload, **network)
        except AdvisorError as err:
            self.post_message(PlanningFailed(str(err)))
            return
        self.post_message(RecommendationReady(rec))

    def planning(self) -> None:
        """Say that a plan is on its way."""
        self.query_one("#rec-summary", Static).update("Planning…")

    def on_recommendation_ready(self, message: RecommendationReady) -> None:
        """Show the plan, the memory bar, the settings, the next best plans and the warnings."""
        rec = self.shown = message.recommendation
        self.query_one("#rec-summary", Static).update(widgets.plan_line(rec))
        table = self.query_one("#settings", DataTable)
        table.clear()
        for name, decision in rec.settings.items():
            table.add_row(name, widgets.value_text(decision.value), key=name)
        self.query_one("#memory-bar", Static).update(widgets.memory_bar(rec.memory))
        self.query_one("#alternatives", Static).update(widgets.alternatives_table(rec))
        self.query_one("#warnings", Static).update(
            widgets.plain("\n".join(f"⚠ {w.message} [{w.rule_id}]" for w in rec.warnings))
        )
        self._explain(next(iter(rec.settings)))
        table.focus(scroll_visible=False)  # keep the plan line and the memory bar in view

    def on_planning_failed(self, message: PlanningFailed) -> None:
        """Clear the answer and show the error line."""
        self.shown = None
        self.query_one("#settings", DataTable).clear()
        for box in ("#why", "#memory-bar", "#alternatives", "#warnings"):
            self.query_one(box, Static).update("")
        summary = self.query_one("#rec-summary", Static)
        summary.add_class("error")
        summary.update(widgets.plain(f"✗ {message.error}"))

    @on(DataTable.RowHighlighted, "#settings")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._explain(event.row_key.value)

    def _explain(self, name: str) -> None:
        if self.shown is not None and name in self.shown.settings:
            self.explained = name
            self.query_one("#rec-summary", Static).remove_class("error")
            self.query_one("#why", Static).update(widgets.explanation(name, self.shown.settings[name]))
