"""The ``advisor`` command line run in this interpreter, as a subprocess would see it.

Starting ``python -m advisor`` costs about two seconds of imports per command; the golden outputs, the README's
commands and most CLI tests only check an exit code, stdout and stderr, which :func:`advisor.app.cli.run` gives in
this process at the price of the command itself. :func:`run_cli` reproduces what the subprocess saw:

- the environment of the call (``ENV`` below: this one with ``HF_HUB_OFFLINE=1`` and ``COLUMNS``) replaces
  ``os.environ`` for the call and the previous one is restored after it (``cli.run`` itself sets
  ``ADVISOR_HUB_TIMEOUT`` for ``--hub-timeout``: that does not leak into the next command);
- the working directory is ``cwd`` (the repository root unless said), restored after the call;
- ``sys.stdout`` / ``sys.stderr`` are ``io.StringIO`` objects: not terminals, like the subprocess's pipes (the rich
  consoles of ``advisor/app/progress.py`` and ``report.py`` are made per call from ``sys.stdout`` and read
  ``COLUMNS`` then, so the width is the call's);
- Python's default warning filters and ``showwarning`` (writing to the captured stderr) instead of pytest's
  recording ones, as in a fresh interpreter;
- ``SystemExit`` (argparse's ``--help`` and usage errors) becomes the exit code, as the interpreter would make it;
- the captured text is read back as ``subprocess.run(text=True)`` decodes a pipe (universal newlines).

The tests that are about the process itself (signals, a closed or full stdout, which modules a command imports,
torchrun, the installed script, the wizard in tmux) still start one and are marked ``subprocess``.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Iterator, Mapping

ROOT = Path(__file__).resolve().parents[1]
#: the environment the commands ran with as subprocesses (PYTHONPATH: for the few that still do)
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "PYTHONPATH": str(ROOT),
    "COLUMNS": "160",
    # never the user's store of measured runs (recording goldens outside pytest too): an empty folder
    "ADVISOR_HOME": os.environ.get("ADVISOR_HOME") or tempfile.mkdtemp(prefix="advisor-home-"),
}


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` is exactly ``env`` inside the block, and what it was before after it."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def working_directory(path: str | Path) -> Iterator[None]:
    saved = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(saved)


def _exit_code(exit: SystemExit, stderr: io.StringIO) -> int:
    """The status the interpreter makes of an uncaught ``SystemExit`` (None: 0, a message: printed, 1)."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    stderr.write(f"{exit.code}\n")
    return 1


def _as_pipe_text(text: str) -> str:
    """What ``subprocess.run(..., text=True)`` reads from a pipe that was written ``text``: universal newlines."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def run_cli(
    argv: list[str] | tuple[str, ...],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path = ROOT,
    columns: int | None = None,
) -> tuple[int, str, str]:
    """``advisor ARGV`` in this interpreter: (exit code, stdout, stderr).

    ``env``: the whole environment of the call (default :data:`ENV`); ``columns`` sets ``COLUMNS`` in it."""
    from advisor.app.cli import run

    given = env
    env = dict(ENV if env is None else env)
    if given is None and "ADVISOR_HOME" in os.environ:  # the test's own store of runs (tests/conftest.py)
        env["ADVISOR_HOME"] = os.environ["ADVISOR_HOME"]
    env.setdefault("HF_HUB_OFFLINE", "1")
    if columns is not None:
        env["COLUMNS"] = str(columns)
    out, err = io.StringIO(), io.StringIO()
    with (
        environment(env),
        working_directory(cwd),
        warnings.catch_warnings(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        warnings.resetwarnings()  # a fresh interpreter's filters (python -m advisor runs without -W options)
        for action, category in (
            ("ignore", DeprecationWarning),
            ("ignore", PendingDeprecationWarning),
            ("ignore", ImportWarning),
            ("ignore", ResourceWarning),
        ):
            warnings.simplefilter(action, category, append=True)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = warnings._showwarning_orig  # noqa: SLF001 (writes to sys.stderr, the captured one)
        try:
            code = run(list(argv))
        except SystemExit as exit:
            code = _exit_code(exit, err)
    return code, _as_pipe_text(out.getvalue()), _as_pipe_text(err.getvalue())


def advisor(*args: str, env: Mapping[str, str] | None = None, cwd: str | Path = ROOT) -> subprocess.CompletedProcess:
    """``advisor ARGS`` in this interpreter, answered as ``subprocess.run(capture_output=True, text=True)`` would."""
    code, out, err = run_cli(args, env=env, cwd=cwd)
    return subprocess.CompletedProcess(["advisor", *args], code, out, err)


def advisor_subprocess(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 120, cwd: str | Path = ROOT
) -> subprocess.CompletedProcess:
    """``python -m advisor ARGS`` in a new process: for the tests of the process itself (mark them ``subprocess``)."""
    return subprocess.run(
        [sys.executable, "-m", "advisor", *args],
        capture_output=True,
        text=True,
        env=dict(ENV if env is None else env),
        cwd=cwd,
        timeout=timeout,
    )
