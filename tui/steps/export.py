"""Step 6, export: recommendation.json, the validation report when there is one, and the configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Static, TabPane

from advisor.engine.recommendation import Recommendation
from advisor.core.errors import AdvisorError
from tui.messages import Exported
from tui.widgets import plain


class ExportStep(TabPane):
    """The folder and the save button; :meth:`save` writes the files and posts :class:`Exported`."""

    STEP = "export"

    def __init__(self, *, out_dir: str) -> None:
        super().__init__("6 Export", id=self.STEP)
        self._out_dir = out_dir

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            with Horizontal(classes="row"):
                yield Label("folder")
                yield Input(value=self._out_dir, id="out-dir")
            yield Button("Save (ctrl+s)", id="save", variant="primary", action="app.save")
            yield Static(
                "Saves recommendation.json, the validation report when there is one, and the "
                "configs: training_args.json, model_kwargs.json, lora_config.json (LoRA / QLoRA), "
                "accelerate_config.yaml, ds_config.json (ZeRO), launch.sh, sft_config.json (TRL), "
                "launch.slurm (several nodes).",
                id="export-result",
            )

    def save(self, recommendation: Recommendation | None, report: Any = None) -> None:
        """Write the recommendation, ``report`` when given, and every config into the folder."""
        from advisor.app.emit import emit
        from advisor.app.files import write_atomic

        box = self.query_one("#export-result", Static)
        if recommendation is None:
            box.update("Nothing to save yet: make a recommendation first (ctrl+r).")
            return
        folder = Path(self.query_one("#out-dir", Input).value.strip() or ".")
        try:
            paths = emit(recommendation, ["all"], folder)
            paths.insert(
                0, write_atomic(folder / "recommendation.json", recommendation.model_dump_json(indent=2) + "\n")
            )
            if report is not None:
                paths.insert(1, write_atomic(folder / "validation.json", report.model_dump_json(indent=2) + "\n"))
        except AdvisorError as err:
            box.add_class("error")
            box.update(plain(f"✗ {err}"))
            return
        box.remove_class("error")
        self.post_message(Exported(paths))
        box.update(plain("Saved:\n" + "\n".join(f"  {p}" for p in paths)))
