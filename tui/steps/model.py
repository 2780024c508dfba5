"""Step 2, model: a Hub id, a folder or a config.json, completed from the shipped catalog, resolved
to its profile in a worker (the profile, or the one-line error the CLI would print)."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static, TabPane

from advisor.app import api
from advisor.core.errors import AdvisorError
from probes.model import ModelProfile, catalog_ids
from tui import widgets
from tui.messages import ModelFailed, ModelResolved


class ModelStep(TabPane):
    """The model question; :meth:`resolve` posts :class:`ModelResolved` or :class:`ModelFailed`."""

    STEP = "model"

    def __init__(self, *, model: str | None = None) -> None:
        super().__init__("2 Model", id=self.STEP)
        self._model = model or ""

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Input(value=self._model, id="model-input",
                        placeholder="Hub id (gpt2), a folder with config.json, or a config.json path",
                        suggester=SuggestFromList(catalog_ids(), case_sensitive=False))
            yield Static("Type a model and press Enter; the shipped catalog completes as you type (→).",
                         id="model-profile")

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
        box.update(f"✗ {message.error}")

    def show_profile(self, profile: ModelProfile) -> None:
        """Show a model's facts (a resolved model, or the one a recommendation used)."""
        box = self.query_one("#model-profile", Static)
        box.remove_class("error")
        box.update(widgets.profile_summary(profile))
