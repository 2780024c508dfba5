"""Step 1, hardware: this machine as probed, or a catalog GPU with its count per node and the nodes."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, OptionList, RadioButton, RadioSet, Static, TabPane
from textual.widgets.option_list import Option

from advisor.app import api
from probes.gpu_catalog import catalog
from probes.hardware import HardwareProfile
from tui import widgets
from tui.widgets import MarkedRadioButton
from tui.fields import whole_number
from advisor.core.errors import AdvisorError
from tui.messages import ComparisonReady, HardwareProbed


class HardwareStep(TabPane):
    """The hardware question. ``gpu`` ('NAME[:COUNT]') preselects a catalog GPU; :meth:`probe` posts
    :class:`HardwareProbed` for this machine."""

    STEP = "hardware"

    def __init__(self, *, gpu: str | None = None, nodes: int = 1) -> None:
        super().__init__("1 Hardware", id=self.STEP)
        self._gpu, self._count = (gpu or "").partition(":")[::2]
        self._node_count = nodes

    def compose(self) -> ComposeResult:
        with VerticalScroll(can_focus=False):  # no invisible Tab stop: focusing a field scrolls it into view
            yield Static("Probing this machine…", id="detected")
            with RadioSet(id="hw-source"):
                yield MarkedRadioButton("This machine", value=not self._gpu, id="hw-local")
                yield MarkedRadioButton(
                    "A catalog GPU (plan for hardware you do not have)", value=bool(self._gpu), id="hw-catalog"
                )
            yield Input(
                value=self._gpu,
                placeholder="search the catalog: a100, h100, 4090…",
                id="gpu-search",
                suggester=SuggestFromList(list(catalog()), case_sensitive=False),
            )
            yield OptionList(*gpu_options(self._gpu), id="gpu-list")
            yield Static("", id="gpu-chosen")
            with Horizontal(classes="row"):
                yield Label("GPUs per node")
                yield Input(value=self._count or "1", type="integer", id="gpu-count")
                yield Label("nodes")
                yield Input(value=str(self._node_count), type="integer", id="nodes")
            yield Button("Which GPU? Compare the catalog for the model (ctrl+g)", id="compare", action="app.compare")
            yield Static("", id="comparison")
            yield Button("Next: the model (ctrl+n)", id="hardware-next", variant="primary", action="app.next_step")

    @work(thread=True, exclusive=True, group="probe")
    def probe(self) -> None:
        """Probe this machine in a worker; posts :class:`HardwareProbed`."""
        self.post_message(HardwareProbed(api.probe_hardware()))

    @work(thread=True, exclusive=True, group="compare")
    def compare(self, model: str, workload: dict) -> None:
        """The model's best plan on every catalog GPU (``advisor compare``) in a worker; posts
        :class:`ComparisonReady`."""
        from advisor.app.compare import compare

        try:
            self.post_message(ComparisonReady(compare(model, **workload)))
        except AdvisorError as err:
            self.post_message(ComparisonReady(error=str(err)))

    def comparing(self) -> None:
        """Say that the comparison is on its way."""
        self.query_one("#comparison", Static).update("Planning on every catalog GPU…")

    def on_comparison_ready(self, message: ComparisonReady) -> None:
        """Show the comparison table (the message goes on to the app)."""
        from advisor.app.compare import comparison_table

        box = self.query_one("#comparison", Static)
        box.update(
            widgets.plain(f"✗ {message.error}") if message.error else comparison_table(message.comparison, width=76)
        )

    def on_hardware_probed(self, message: HardwareProbed) -> None:
        """Show the probed machine (the message goes on to the app)."""
        self.show(message.hardware)

    def show(self, hardware: HardwareProfile) -> None:
        """Show the detected machine."""
        self.query_one("#detected", Static).update(widgets.hardware_summary(hardware))

    def on_mount(self) -> None:
        """Show which catalog GPU ``--gpu`` chose."""
        self._show_chosen()

    @on(Input.Changed, "#gpu-search")
    def _filter_gpus(self, event: Input.Changed) -> None:
        """The search text filters the list; its first match (an exact id first) is the GPU chosen until another
        row is highlighted (issue 45: the text itself was taken for the GPU, 'h100' then was an unknown GPU)."""
        options = self.query_one("#gpu-list", OptionList)
        chosen = self.chosen_gpu
        options.clear_options()
        options.add_options(gpu_options(event.value))
        ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
        if event.value.strip() and ids:
            options.highlighted = ids.index(chosen) if chosen in ids else 0
        if event.value.strip():
            self.query_one("#hw-catalog", RadioButton).value = True
        self._show_chosen()

    @on(OptionList.OptionHighlighted, "#gpu-list")
    @on(RadioSet.Changed, "#hw-source")
    def _highlight_gpu(self, event) -> None:
        self._show_chosen()

    @on(OptionList.OptionSelected, "#gpu-list")
    def _pick_gpu(self, event: OptionList.OptionSelected) -> None:
        self.query_one("#gpu-search", Input).value = event.option.id or ""
        self.query_one("#hw-catalog", RadioButton).value = True

    @property
    def chosen_gpu(self) -> str | None:
        """The catalog id of the highlighted row of the GPU list, or None (no row highlighted, or no match)."""
        options = self.query_one("#gpu-list", OptionList)
        if options.highlighted is None or not options.option_count:
            return None
        return options.get_option_at_index(options.highlighted).id

    def _show_chosen(self) -> None:
        """Say in words which GPU a plan for a catalog GPU takes (the list's highlight is a colour only)."""
        text = self.query_one("#gpu-search", Input).value.strip()
        chosen = self.chosen_gpu
        line = (
            "→ plans for this machine (type to search the catalog)"
            if not self.query_one("#hw-catalog", RadioButton).value
            else f"→ chosen: {chosen} ({catalog()[chosen].name})"
            if chosen
            else f"✗ no catalog GPU matches '{text}'"
            if text
            else "→ chosen: none yet (type to search, ↓ to pick)"
        )
        self.query_one("#gpu-chosen", Static).update(widgets.plain(line))

    def gpu_choice(self) -> tuple[str | None, int]:
        """The hardware question: (catalog 'NAME:COUNT' or None for this machine, nodes). The catalog GPU is the
        highlighted row of the list; with no row, the text as typed (the planner's error names what it may mean)."""
        nodes = whole_number(self.query_one("#nodes", Input).value, 1)
        if not self.query_one("#hw-catalog", RadioButton).value:
            return None, nodes
        name = self.chosen_gpu or self.query_one("#gpu-search", Input).value.strip().partition(":")[0]
        if not name:
            return None, nodes
        return f"{name}:{whole_number(self.query_one('#gpu-count', Input).value, 1)}", nodes


def gpu_options(text: str) -> list[Option]:
    """The catalog GPUs whose id or name contains ``text`` (before any ':COUNT'), one line each: an exact id first,
    then in catalog order."""
    needle = text.strip().lower().partition(":")[0]
    entries = sorted(
        (e for e in catalog().values() if needle in e.id or needle in e.name.lower()), key=lambda e: e.id != needle
    )
    return [
        Option(f"{e.id:<15} {e.name} · {e.memory_gib:g} GiB · {'bf16' if e.peak_tflops.bf16 else 'fp16'}", id=e.id)
        for e in entries
    ]
