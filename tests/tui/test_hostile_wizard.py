"""Issue 44, the wizard given hostile text: a folder named with Textual's markup ('a[/b]'), a GPU search of '[/', an
escape sequence in a config. A Static given a string parses markup, so each raised MarkupError and closed the wizard;
now what came from a file or a key press is shown as text (``tui.widgets.plain``), its control characters escaped."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("textual")

from wizard_kit import CPU_HW, SIZE, anyio_backend, wait_for  # noqa: E402,F401
from tui.app import AdvisorApp  # noqa: E402
from tui.steps import ModelStep  # noqa: E402
from tui.widgets import plain  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
TINY = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 100, "n_positions": 64}


async def test_markup_and_escapes_from_files_and_keys_are_shown_as_text(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a[" / "b]").mkdir(parents=True)
    (tmp_path / "a[" / "b]" / "config.json").write_text(json.dumps(TINY))
    app = AdvisorApp(model="a[/b]", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        profile = app.query_one("#model-profile")
        await wait_for(pilot, lambda: app.profile is not None)  # its facts drawn: the table's cells are text
        await pilot.pause()
        assert app.profile.id == "a[/b]" and app.is_running
        app.query_one(ModelStep).resolve("x[/y]\x1b[2J")  # a folder that is not there: the error line names it
        await wait_for(pilot, lambda: "x[/y]" in str(profile.render()))
        assert "\x1b" not in str(profile.render()) and "\\x1b[2J" in str(profile.render())
        app.query_one("#gpu-search").value = "[/"  # typed in the GPU search
        await pilot.pause()
        assert "no catalog GPU matches '[/'" in str(app.query_one("#gpu-chosen").render())
        assert app.is_running


def test_plain_keeps_lines_and_escapes_each() -> None:
    text = plain("Saved:\n  a[/b]\x1b[2J\n  [bold]c")
    assert text.plain == "Saved:\n  a[/b]\\x1b[2J\n  [bold]c" and not text.spans
