"""Step 3, workload: sequence length, global batch size, task head, what to train (the fine-tuning method)
and objective, with the optional packages that widen the planner's choice."""

from __future__ import annotations

import importlib.util
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Select, Static, TabPane

from advisor.app.options import (
    DEFAULT_GLOBAL_BATCH_SIZE,
    DEFAULT_SEQ_LEN,
    METHOD_CHOICES,
    OPTIONAL_PACKAGES,
    MethodOptions,
    StackOptions,
)
from advisor.core.vocabulary import Method, Objective, Task, values
from tui.fields import AUTO, option_choices, whole_number
from tui.widgets import MarkedRadioButton

NO_SELECTION = getattr(Select, "NULL", None) or Select.BLANK  #: Textual >= 8 names the sentinel NULL
OBJECTIVE_LABELS = {
    Objective.SPEED: "Fastest plan that fits",
    Objective.MEMORY: "Least memory within 10 % of the fastest",
}
AUTO_METHOD = MethodOptions.model_fields["method"].default  #: 'auto': the planner chooses
#: The method list's labels (the values are ``recommend``'s ``--method`` choices, :data:`METHOD_CHOICES`).
METHOD_LABELS = {
    AUTO_METHOD: "auto: full if it fits, else LoRA / QLoRA",
    Method.FULL: "full fine-tuning",
    Method.LORA: "LoRA adapters",
    Method.QLORA: "QLoRA (4-bit base)",
}


class WorkloadStep(TabPane):
    """The workload question (:meth:`workload_choice`), and the button that asks for a recommendation."""

    STEP = "workload"

    def __init__(
        self,
        *,
        seq_len: int | None = None,
        global_batch_size: int | None = None,
        task: str | None = None,
        objective: str = Objective.SPEED,
        method: str = AUTO_METHOD,
        stack: dict[str, Any] | None = None,
    ) -> None:
        super().__init__("3 Workload", id=self.STEP)
        self._seq_len, self._global_batch_size, self._task_option = seq_len, global_batch_size, task
        self._stack = {k: v for k, v in (stack or {}).items() if v is not None}
        self._objective = Objective.MEMORY if objective == Objective.MEMORY else Objective.SPEED
        self._method = method

    def compose(self) -> ComposeResult:
        with VerticalScroll(can_focus=False):  # no invisible Tab stop: focusing a field scrolls it into view
            with Horizontal(classes="row"):
                yield Label("sequence length")
                yield Input(
                    value=str(self._seq_len or ""),
                    type="integer",
                    id="seq-len",
                    placeholder=f"default: min(max positions, {DEFAULT_SEQ_LEN})",
                )
            with Horizontal(classes="row"):
                yield Label("global batch size")
                yield Input(
                    value=str(self._global_batch_size or DEFAULT_GLOBAL_BATCH_SIZE), type="integer", id="global-batch"
                )
            with Horizontal(classes="row"):
                yield Label("task head")
                yield Select(
                    [(t, t) for t in values(Task)],
                    value=self._task_option or NO_SELECTION,
                    prompt="from the config",
                    id="task",
                )
            with Horizontal(classes="row"):
                yield Label("what to train")
                yield Select(
                    [(METHOD_LABELS[m], m) for m in METHOD_CHOICES], value=self._method, allow_blank=False, id="method"
                )
            with RadioSet(id="objective"):
                for objective, label in OBJECTIVE_LABELS.items():
                    yield MarkedRadioButton(label, value=objective is self._objective, id=f"objective-{objective}")
            for name in StackOptions.model_fields:  # recommend's software-stack flags, as the CLI declares them
                flag, help_text, choices = option_choices(StackOptions, name)
                with Horizontal(classes="row"):
                    yield Label(flag)
                    select = Select(
                        choices,
                        value=self._stack.get(name, AUTO),
                        allow_blank=False,
                        id=f"stack-{name.replace('_', '-')}",
                    )
                    select.tooltip = help_text
                    yield select
            yield Static(packages_text(), id="packages")
            yield Button("Recommend (ctrl+r)", id="recommend", variant="primary", action="app.recommend")

    def task_choice(self) -> str | None:
        """The task head chosen, or None: the one from the model's config."""
        value = self.query_one("#task", Select).value
        return value if isinstance(value, str) else None

    def method_choice(self) -> str:
        """The method chosen: one of ``recommend``'s ``--method`` choices ('auto' lets the planner choose)."""
        value = self.query_one("#method", Select).value
        return value if isinstance(value, str) else AUTO_METHOD

    def workload_choice(self) -> dict[str, Any]:
        """The workload question: sequence length, global batch size, task, objective and method."""
        memory = self.query_one(f"#objective-{Objective.MEMORY}", RadioButton).value
        objective = Objective.MEMORY if memory else Objective.SPEED
        return dict(
            seq_len=whole_number(self.query_one("#seq-len", Input).value, None),
            global_batch_size=whole_number(self.query_one("#global-batch", Input).value, None),
            task=self.task_choice(),
            objective=objective.value,
            method=self.method_choice(),
        )

    def stack_choice(self) -> dict[str, Any]:
        """The software-stack values asked for (``recommend --attention …``), without those left to the planner."""
        chosen = {
            name: self.query_one(f"#stack-{name.replace('_', '-')}", Select).value for name in StackOptions.model_fields
        }
        return {name: value for name, value in chosen.items() if value != AUTO}


def packages_text() -> str:
    """Which of the optional packages that widen the planner's choice are installed here."""
    found = {name: importlib.util.find_spec(name) is not None for name in OPTIONAL_PACKAGES}
    return "Packages that widen the choice: " + ", ".join(
        f"{name} {'found' if ok else 'missing'}" for name, ok in found.items()
    )
