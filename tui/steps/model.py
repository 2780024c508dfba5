"""Step 2, model: a Hub id, a folder or a config.json, completed from the shipped catalog, resolved
to its profile in a worker (the profile, or the one-line error the CLI would print)."""

from __future__ import annotations

from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, OptionList, Static, TabPane
from textual.widgets.option_list import Option

from advisor.app import api
from advisor.core.errors import AdvisorError
from probes.model import ModelProfile, catalog_ids
from probes.model_ids import matching_ids
from tui import widgets
from tui.messages import ModelFailed, ModelResolved


class ModelStep(TabPane):
    """The model question; :meth:`resolve` posts :class:`ModelResolved` or :class:`ModelFailed`."""

    STEP = "model"

    def __init__(self, *, model: str | None = None) -> None:
        super().__init__("2 Model", id=self.STEP)
        self._model = model or ""

    def compose(self) -> ComposeResult:
        with VerticalScroll(can_focus=False):  # no invisible Tab stop: focusing a field scrolls it into view
            yield Input(
                value=self._model,
                id="model-input",
                placeholder="Hub id (gpt2), a folder with config.json, or a config.json path",
                suggester=SuggestFromList(catalog_ids(), case_sensitive=False),
            )
            yield OptionList(id="model-matches")
            yield Static(
                "Type a model and press Enter; the shipped catalog completes as you type (→), and lists "
                "the ids that hold what you typed (↓ to pick one).",
                id="model-profile",
            )
            yield Button("Next: the workload (ctrl+n)", id="model-next", variant="primary", action="app.next_step")

    def on_mount(self) -> None:
        """Hide the list of matches until something is typed."""
        self._list_matches(self._model)

    @on(Input.Changed, "#model-input")
    def _typed(self, event: Input.Changed) -> None:
        self._list_matches(event.value)

    def _list_matches(self, text: str) -> None:
        """The catalog ids that hold ``text`` anywhere (:func:`probes.model_ids.matching_ids`), shown below the
        field; hidden when there are none, or the text is the one match."""
        matches = self.query_one("#model-matches", OptionList)
        ids = matching_ids(text)
        matches.clear_options()
        matches.add_options([Option(i, id=i) for i in ids])
        matches.display = bool(ids) and ids != [text.strip()]

    def on_key(self, event: events.Key) -> None:
        """↓ in the field goes to the list of matches."""
        matches = self.query_one("#model-matches", OptionList)
        if event.key == "down" and self.app.focused is self.query_one("#model-input") and matches.display:
            matches.focus()
            matches.highlighted = 0
            event.stop()

    @on(OptionList.OptionSelected, "#model-matches")
    def _pick(self, event: OptionList.OptionSelected) -> None:
        """A match chosen: it becomes the model, resolved as Enter in the field would."""
        box = self.query_one("#model-input", Input)
        box.value = event.option.id or ""
        box.focus()
        box.call_later(box.action_submit)  # from the field's own loop: one this step sent would not bubble past it

    @property
    def text(self) -> str:
        """The model as typed (stripped)."""
        return self.query_one("#model-input", Input).value.strip()

    @work(thread=True, exclusive=True, group="model")
    def resolve(self, text: str, task: str | None = None, then_recommend: bool = False) -> None:
        """Profile ``text`` in a worker; with ``then_recommend`` run the app's ``recommend`` action after."""
        try:
            profile = api.profile_model(text, task)
        except AdvisorError as err:
            self.post_message(ModelFailed(text, str(err)))
            return
        self.post_message(ModelResolved(profile))
        if then_recommend:
            self.app.call_from_thread(self.run_action, "app.recommend")

    def on_model_resolved(self, message: ModelResolved) -> None:
        """Show the resolved model's facts."""
        self.show_profile(message.profile)

    def on_model_failed(self, message: ModelFailed) -> None:
        """Show the error line in place of the facts."""
        box = self.query_one("#model-profile", Static)
        box.add_class("error")
        box.update(widgets.plain(f"✗ {message.error}"))

    def show_profile(self, profile: ModelProfile) -> None:
        """Show a model's facts (a resolved model, or the one a recommendation used)."""
        box = self.query_one("#model-profile", Static)
        box.remove_class("error")
        box.update(widgets.profile_summary(profile))
