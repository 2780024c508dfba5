"""The ``advisor`` command's entry point, before anything heavy is imported: the standard streams made safe and
Ctrl-C answered from the first instant.

- Ctrl-C while the command's modules import (the first half second; seconds when ``validate`` imports torch) is
  ``advisor: interrupted`` and exit 130, not a traceback: :func:`main` imports :mod:`advisor.app.cli` inside its
  ``try``, and this module imports nothing but the standard library.
- A closed stdout (``>&-``: Python's ``sys.stdout`` is None) is exit 7 when the command writes to it ("a closed or full
  stdout", :class:`advisor.core.errors.ExitCode`); a closed stderr loses the diagnostics, never the exit code; the
  closed descriptors are held on ``/dev/null`` so that no file advisor opens, and no process it starts, takes them.
- An encoding that cannot spell a character (``PYTHONIOENCODING=ascii`` and the card's ``×``; a ``--model`` byte
  that is not UTF-8, which Python keeps as a lone surrogate) prints ``?`` in its place rather than failing:
  the streams write with ``errors="replace"`` (a JSON output stays JSON).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
import sys
from typing import NoReturn

#: advisor.core.errors.ExitCode's (not imported: this module imports nothing but the standard library)
INTERRUPTED, OUTPUT = 130, 7


class _ClosedStream:
    """Stands in for a standard stream whose descriptor was closed. Writing to a closed stdout fails as a write to a
    closed descriptor does (EBADF: the CLI's exit 7); what goes to a closed stderr is dropped."""

    def __init__(self, name: str, *, fail: bool) -> None:
        self.name, self.fail = name, fail

    def write(self, text: str) -> int:
        if self.fail and text:
            raise OSError(errno.EBADF, f"{self.name} is closed")
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, f"{self.name} is closed")


def guard_streams() -> None:
    """Make the standard streams safe to use (see the module's docstring). Never raises."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:  # closed: hold it on /dev/null (os.open takes the lowest free descriptor)
            try:
                held = os.open(os.devnull, os.O_RDWR)
                if held != fd:
                    os.dup2(held, fd)
                    os.close(held)
            except OSError:
                pass
    if sys.stdout is None:
        sys.stdout = _ClosedStream("stdout", fail=True)
    if sys.stderr is None:
        sys.stderr = _ClosedStream("stderr", fail=False)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError, OSError):  # not a TextIOWrapper (captured, or a stand-in)
            pass


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


#: The cyclic garbage collector's first-generation threshold for one command (CPython's default is 700 allocations):
#: a search allocates plans and estimates by the hundred thousand, nearly all of them alive until the answer, so the
#: default ran full collections over the same caches again and again (a third of the CPU time of a 16-GPU search,
#: measured: 5.3 s with the default, 3.5 s with this). Cycles are still collected, less often; the process lives for
#: one command.
GC_THRESHOLD = 50_000


def _quiet_collector() -> None:
    """Move what the imports made out of the collector's reach (``gc.freeze``: CPython's advice for long-lived
    objects, https://docs.python.org/3/library/gc.html#gc.freeze) and collect young objects less often
    (:data:`GC_THRESHOLD`)."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


@contextlib.contextmanager
def _held_interrupt():
    """Hold a Ctrl-C that comes while the command's modules import, and raise it once they have: pydantic builds its
    schemas in Rust while classes are made, and wraps a KeyboardInterrupt raised there in a SchemaError (an "internal
    error" instead of exit 130). The imports take a fraction of a second, so the answer is as prompt."""
    held: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    except (ValueError, OSError):  # not the main thread: nothing to hold
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of the ``advisor`` script and ``python -m advisor``: the command's exit code
    (:class:`advisor.core.errors.ExitCode`); Ctrl-C at any point, imports included, is exit 130 in one line."""
    try:
        guard_streams()
        with _held_interrupt():
            from advisor.app.cli import run
            from advisor.app.validate_command import settle

        _quiet_collector()
        code = settle(run(argv))  # after a trial cut mid-step, the process ends at once (settle)
    except KeyboardInterrupt:
        _say("advisor: interrupted")
        code = INTERRUPTED
    except OSError as err:  # --help or --version to a closed stdout (the commands' own writes: cli.run)
        _say(f"advisor: error: cannot write the output: {err.strerror or err}")
        code = OUTPUT
    try:  # the answer is out: a Ctrl-C from now on would only kill the exit itself (silently, by SIGINT)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):  # not the main thread
        pass
    if code == INTERRUPTED:
        # CPython 3.11 ends a process whose Ctrl-C interrupted an ``exec`` of a string (dataclasses, pydantic build
        # classes so while importing) by SIGINT at exit, whatever the code: leave with the documented one
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(code)
    sys.exit(code)
