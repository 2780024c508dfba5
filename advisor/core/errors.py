"""Typed errors and the one table of exit codes.

Every error the user can cause is an :class:`AdvisorError` subclass that carries its exit code
and a one-line message; the CLI maps it to stderr and ``sys.exit`` in one place
(``advisor.app.cli.run``), so a bad input never prints a traceback. This is a leaf module (it imports
nothing), kept in the base layer because the probes, the engine and the application raise these errors
(rules never raise: they forbid, and the engine turns a refusal into a :class:`UsageError`); the exit
codes sit beside the errors so that each error names its code in one place.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of the ``advisor`` command (a contract: other tools depend on them)."""

    OK = 0
    INTERNAL = 1  #: a bug in advisor: please report it
    USAGE = 2  #: bad flags or values (argparse also exits 2), unknown GPU name
    MODEL_NOT_FOUND = 3  #: the model id or path resolves to no config.json
    BAD_CONFIG = 4  #: a config.json that is malformed or not a transformers config
    NO_FIT = 5  #: no plan fits the hardware's memory
    VALIDATION_FAILED = 6  #: ``advisor validate``: no trial ran cleanly (out of memory, non-finite loss, error)
    OUTPUT = 7  #: an output could not be written: a missing or read-only folder, a target that is not a regular
    #: file (a directory, a device), a full disk, a closed or full stdout; nothing was half-written
    INTERRUPTED = 130  #: Ctrl-C


class AdvisorError(Exception):
    """Base of every error advisor reports to a user as one line."""

    exit_code: ExitCode = ExitCode.INTERNAL


class UsageError(AdvisorError):
    """A flag or value the command cannot use (e.g. ``--seq-len 0``)."""

    exit_code = ExitCode.USAGE


class UnknownGPUError(UsageError):
    """``--gpu NAME`` names no GPU of the shipped catalog."""


class OutputError(AdvisorError):
    """An output target advisor refuses or fails to write (checked before the work starts where it can be)."""

    exit_code = ExitCode.OUTPUT


class ModelNotFoundError(AdvisorError):
    """No config.json for the id or path: not local, not cached, not on the Hub, not shipped."""

    exit_code = ExitCode.MODEL_NOT_FOUND


class BadConfigError(AdvisorError):
    """A config.json that is not valid JSON or not a transformers model config."""

    exit_code = ExitCode.BAD_CONFIG


class NoFitError(AdvisorError):
    """No candidate plan fits in memory; the message says what would.

    Attributes: ``summary`` (the message without the suggestions), ``suggestions`` (what would fit,
    one phrase each), ``closest`` (the planner's candidate with the least memory, or None).
    """

    exit_code = ExitCode.NO_FIT

    def __init__(
        self, message: str, *, summary: str | None = None, suggestions: list[str] | None = None, closest: object = None
    ) -> None:
        super().__init__(message)
        self.summary = summary or message
        self.suggestions = suggestions or []
        self.closest = closest
