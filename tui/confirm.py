"""A yes / no question before slow work: the wizard's counterpart of the command line's warnings."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static
from tui.widgets import plain


class Confirm(ModalScreen[bool]):
    """The question, Start (y / enter) or Not now (n / escape); dismissed with True or False."""

    BINDINGS = [Binding("y", "answer(True)", "Start"), Binding("n,escape", "answer(False)", "Not now")]

    def __init__(self, question: str, yes: str = "Start (y)", no: str = "Not now (n)") -> None:
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(plain(self.question), id="confirm-question")
            with Horizontal(classes="row"):
                yield Button(self.yes, id="confirm-yes", variant="primary")
                yield Button(self.no, id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
