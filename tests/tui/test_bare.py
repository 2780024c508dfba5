"""Issue 45: ``advisor tui`` without ``--model`` (the wizard's first use: its first step is choosing a model) exited 2
with "--model must be a Hub id or a path, got PydanticUndefined". Opened bare through the command line's own parser,
and once in a pseudo-terminal as a user starts the installed command: read the screen, type, quit."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

pytest.importorskip("textual")

from advisor.app.cli import run  # noqa: E402
from wizard_kit import CPU_HW  # noqa: E402


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_help_shows_no_pydantic_sentinel() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        run(["tui", "--help"])
    assert "PydanticUndefined" not in out.getvalue()
    assert "the wizard asks for it on its model step" in " ".join(out.getvalue().split())


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_advisor_tui_without_a_model_opens_on_the_hardware_step(monkeypatch, anyio_backend) -> None:
    """The command line's parse of a bare ``advisor tui`` reaches the wizard, which opens on step 1 with no model."""
    import tui.app
    from tui.app import AdvisorApp

    seen: dict = {}
    monkeypatch.setattr(tui.app, "run", lambda **options: seen.update(options) or 0)
    monkeypatch.setattr(sys, "stdin", _Terminal())
    err = io.StringIO()
    with contextlib.redirect_stdout(_Terminal()), contextlib.redirect_stderr(err):
        assert run(["tui"]) == 0, err.getvalue()
    assert seen["model"] is None and err.getvalue() == ""
    app = AdvisorApp(**seen, hardware=CPU_HW)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        assert app.step == "hardware" and app.query_one("#model-input").value == ""
        assert app.profile is None and app.recommendation is None


_ESCAPE = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


class _Screen:
    """What a pseudo-terminal's program wrote, its escape sequences removed (Textual repaints what changed: the
    text is searched in all it wrote so far)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.raw = fd, b""

    @property
    def text(self) -> str:
        return _ESCAPE.sub(b"", self.raw).decode("utf-8", "replace")

    def read(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.1))
            if ready:
                try:
                    self.raw += os.read(self.fd, 65536)
                except OSError:  # the program ended: its side is closed
                    return

    def wait_for(self, *words: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not all(w in self.text for w in words):
            assert time.monotonic() < end, f"timed out waiting for {words}; the screen said: {self.text[-2000:]}"
            self.read(0.2)


@pytest.mark.subprocess
@pytest.mark.slow
def test_the_installed_command_opens_bare_in_a_pseudo_terminal(tmp_path: Path) -> None:
    """``advisor tui`` in an 80 x 24 pseudo-terminal: step 1 shows, ctrl+n goes to the model step, typing gpt2 and
    Enter shows its parameter count, escape then q ends it with exit code 0."""
    command = Path(sys.executable).with_name("advisor")
    if not command.exists():
        pytest.skip("the advisor command is not installed beside this interpreter")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"}
    proc = subprocess.Popen(
        [str(command), "tui"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    os.close(follower)
    screen = _Screen(leader)
    try:
        screen.wait_for("1 Hardware", "2 Model")
        assert "PydanticUndefined" not in screen.text
        screen.read(1.0)  # let the first paint and the probe settle before keys arrive
        os.write(leader, b"\x0e")  # ctrl+n: the model step, its input focused
        screen.wait_for("Type a model")
        os.write(leader, b"gpt2\r")
        screen.wait_for("124,439,808")  # gpt2's parameters with its causal-lm head, from the profile
        os.write(leader, b"\x1b")  # escape: leave the field, so that q quits
        screen.read(0.5)
        os.write(leader, b"q")
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            screen.read(0.2)
        assert proc.returncode == 0, screen.text[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
