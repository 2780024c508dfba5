"""Step 5, validate: short trial steps of this machine's plan in a worker, with live progress; cancel
stops it (within 2 s: the step under way is cut) and keeps the partial report."""

from __future__ import annotations

import threading
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Checkbox, Input, Label, ProgressBar, Static, TabPane

from advisor.app import api
from advisor.app.options import TrialOptions
from advisor.core.errors import AdvisorError
from tui import widgets
from tui.fields import whole_number
from tui.messages import ValidationDone, ValidationProgress

DEFAULT_TRIAL_STEPS = TrialOptions.model_fields["steps"].default  #: the timed steps of a trial


class ValidateStep(TabPane):
    """The trial runner; :meth:`start` posts :class:`ValidationProgress` events, then :class:`ValidationDone`."""

    STEP = "validate"

    def __init__(self) -> None:
        super().__init__("5 Validate", id=self.STEP)
        self._stop = threading.Event()
        self.running = False  #: a validation is under way

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("Trial steps of this machine's plan for the model and workload above.", id="validate-where")
            with Horizontal(classes="row"):
                yield Label("timed steps")
                yield Input(value=str(DEFAULT_TRIAL_STEPS), type="integer", id="trial-steps")
                yield Checkbox("compare with the fp32 baseline", id="compare")
            with Horizontal(classes="row"):
                yield Button("Start (ctrl+t)", id="validate-start", variant="primary", action="app.validate")
                yield Button("Cancel (esc)", id="validate-cancel", disabled=True, action="app.cancel")
            yield ProgressBar(id="validate-progress", show_eta=False)
            yield Static("", id="validate-live")
            yield Static("", id="validate-result")

    def trial_steps(self) -> int:
        """The timed steps asked for."""
        return whole_number(self.query_one("#trial-steps", Input).value, DEFAULT_TRIAL_STEPS)

    def start(self, text: str, workload: dict[str, Any]) -> None:
        """Validate model ``text`` with ``workload`` (seq_len, global_batch_size, task) and this step's settings."""
        self.running = True
        self._stop.clear()
        self.query_one("#validate-start", Button).disabled = True
        self.query_one("#validate-cancel", Button).disabled = False
        self.query_one("#validate-result", Static).update("")
        self.query_one("#validate-live", Static).update("Building the model…")
        self.run_validation(text, workload, self.trial_steps(), self.query_one("#compare", Checkbox).value)

    def cancel(self) -> None:
        """Ask the running validation to stop (within 2 s; a distributed trial at its step boundary)."""
        self._stop.set()
        self.query_one("#validate-live", Static).update("Stopping… (at the end of the current step)")

    @work(thread=True, exclusive=True, group="validate")
    def run_validation(self, text: str, workload: dict[str, Any], steps: int, compare: bool) -> None:
        """The validator in a worker thread."""
        try:
            report = api.validate(
                text,
                steps=steps,
                compare=compare,
                stop=self._stop,
                progress=lambda event: self.post_message(ValidationProgress(event)),
                **workload,
            )
        except AdvisorError as err:
            self.post_message(ValidationDone(error=str(err)))
            return
        except Exception as err:  # a bug must not take the wizard down with it
            self.post_message(ValidationDone(error=f"internal error: {type(err).__name__}: {err}"))
            return
        self.post_message(ValidationDone(report=report))

    def on_validation_progress(self, message: ValidationProgress) -> None:
        """Move the progress bar and say what the trial is doing."""
        from advisor.measure.trial import StepUpdate
        from advisor.measure.validation import Trial, TrialStarted

        event, bar, live = (
            message.event,
            self.query_one("#validate-progress", ProgressBar),
            self.query_one("#validate-live", Static),
        )
        if isinstance(event, TrialStarted):
            bar.update(total=event.total_steps, progress=0)
            live.update(
                f"Trial {event.index} ({event.role}): {event.plan.describe()}; predicted "
                f"{event.predicted_step_time_s:.3g} s/step"
            )
        elif isinstance(event, StepUpdate):
            bar.update(total=event.total, progress=event.step)
            live.update(event.describe())
        elif isinstance(event, Trial):
            live.update(
                widgets.plain(f"Trial finished: {event.status}" + (f" ({event.message})" if event.message else ""))
            )
        if self._stop.is_set():  # the stopping state stays in view until the report comes
            live.update("Stopping… (at the end of the current step)")

    def on_validation_done(self, message: ValidationDone) -> None:
        """Show the report (or the error line) and re-arm the buttons."""
        from advisor.app.report import validation_tables

        self.running = False
        self.query_one("#validate-start", Button).disabled = False
        self.query_one("#validate-cancel", Button).disabled = True
        result = self.query_one("#validate-result", Static)
        if message.error:
            result.add_class("error")
            result.update(widgets.plain(f"✗ {message.error}"))
            return
        result.remove_class("error")
        result.update(validation_tables(message.report))
        self.query_one("#validate-live", Static).update(
            "Cancelled: the partial report is kept." if message.report.interrupted else "Done."
        )
