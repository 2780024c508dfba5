"""The local store of measured runs: one JSON line per run (a ``validate`` trial, a training run through
:mod:`advisor.integrations`), kept on this machine and never sent anywhere.

Where: ``$ADVISOR_HOME/runs.jsonl``, else ``$XDG_CACHE_HOME/advisor/runs.jsonl``, else
``~/.cache/advisor/runs.jsonl``. A record is written whole by one ``os.write`` on an ``O_APPEND`` descriptor under an
exclusive ``fcntl.flock``, so concurrent writers never interleave; a process killed mid-write can leave at most one
torn line, which readers skip and count (:class:`Runs`) and the next writer ends with a newline before its own. Only a
regular file is a store: a FIFO, a device or a folder at its path is refused (``OSError``), never waited on or read
without end; a reader parses the newest :data:`MAX_RECORDS` records at most. Imports no torch (library versions are
read from the installed packages' metadata).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

#: Where a record comes from.
SOURCE_VALIDATE = "validate"
SOURCE_CALLBACK = "callback"
#: The record format's version (a reader skips records of a later major version it does not know).
RECORD_VERSION = 1
STORE_FILE = "runs.jsonl"
#: Packages whose versions a record keeps (read from their metadata, nothing imported).
LIBRARIES = ("torch", "transformers", "peft", "accelerate", "deepspeed", "bitsandbytes", "trl", "advisor")
#: The largest store read (bytes): a bigger file is read from its last MAX_READ_BYTES only.
MAX_READ_BYTES = 64 * 1024 * 1024
#: The most records a reader parses: the newest ones (older lines are counted in :attr:`Runs.older`, not parsed).
#: A validate trial or a training run adds one record of about 2 KB; 10,000 is a trial a day with 12 corrections for
#: over two years, parsed in about 0.3 CPU-s on a 2-core Xeon, where the 4.8 million 14-byte records that fit in
#: :data:`MAX_READ_BYTES` took 12 CPU-s and 1.6 GB in every ``recommend`` (issue 44).
MAX_RECORDS = 10_000


def store_dir() -> Path:
    """The store's folder: ``$ADVISOR_HOME``, else ``$XDG_CACHE_HOME/advisor``, else ``~/.cache/advisor``."""
    home = os.environ.get("ADVISOR_HOME")
    if home:
        return Path(home)
    cache = os.environ.get("XDG_CACHE_HOME")
    return (Path(cache) if cache else Path.home() / ".cache") / "advisor"


def store_path() -> Path:
    """The store's file (:func:`store_dir` / ``runs.jsonl``); it may not exist yet."""
    return store_dir() / STORE_FILE


def library_versions() -> dict[str, str]:
    """The installed versions of :data:`LIBRARIES` (those installed), from package metadata."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def now() -> str:
    """The current time, ISO 8601 UTC to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@contextmanager
def _locked(path: Path, flags: int, lock: int) -> Iterator[int]:
    """An fd of ``path`` opened with ``flags`` and held under ``flock(lock)`` (the folder made first).

    Opened without blocking (a FIFO at the path would wait for a writer) and refused unless it is a regular file.

    Raises:
        OSError: the folder or file cannot be made or opened, or the path is not a regular file (a FIFO, a device, a
            folder: ``EINVAL``, "not a regular file")."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, flags | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        fcntl.flock(fd, lock)
        yield fd
    finally:
        os.close(fd)  # closing drops the lock


def append(record: dict[str, Any], path: Path | None = None) -> Path:
    """Append ``record`` as one JSON line to the store (default :func:`store_path`) and return the file's path.

    The line is written by one ``os.write`` under an exclusive lock (a rare short write is completed under the same
    lock); if the file ends in a torn line (a writer killed mid-write), a newline closes it first.

    Raises:
        OSError: the folder or file cannot be made or written.
        ValueError: ``record`` is not JSON-serialisable (NaN and infinity included).
    """
    path = path or store_path()
    line = (json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":")) + "\n").encode()
    with _locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, fcntl.LOCK_EX) as fd:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        while written < len(line):
            written += os.write(fd, line[written:])
    return path


@dataclass
class Runs:
    """What the store holds: the records read, and the lines skipped (torn or not a record)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    path: Path | None = None
    older: int = (
        0  #: older lines left unparsed, past :data:`MAX_RECORDS` (those before the last MAX_READ_BYTES uncounted)
    )


#: The type of each field of a record (:func:`record`); a line whose field has another type is not a record.
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "date": str,
    "source": str,
    "notes": str,
    "seq_len": int,
    "device": dict,
    "libraries": dict,
    "model": dict,
    "plan": dict,
    "predicted": dict,
    "measured": dict,
}


def _not_a_number(name: str) -> float:
    """``json.loads``' hook for NaN and Infinity, which no record holds (:func:`append` refuses them)."""
    raise ValueError(f"{name} is not a number of a record")


def _parse(line: bytes) -> dict[str, Any] | None:
    """A line's record, or None for a torn or foreign line (not JSON, a later version, a field of another type:
    readers may then trust each field's type)."""
    try:
        record = json.loads(line, parse_constant=_not_a_number)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("version"), int) or record["version"] > RECORD_VERSION:
        return None
    if any(key in record and not isinstance(record[key], kind) for key, kind in _FIELD_TYPES.items()):
        return None
    return record


def read(path: Path | None = None) -> Runs:
    """The newest :data:`MAX_RECORDS` lines' records of the store (default :func:`store_path`), oldest first, from its
    last :data:`MAX_READ_BYTES`; malformed lines are skipped and counted, older lines counted in :attr:`Runs.older`.

    A missing store is empty. Raises OSError: the path exists but is not a regular file, or cannot be read."""
    path = path or store_path()
    if not path.exists():
        return Runs(path=path)
    with _locked(path, os.O_RDONLY, fcntl.LOCK_SH) as fd:
        size = os.fstat(fd).st_size
        start = max(0, size - MAX_READ_BYTES)
        data = os.pread(fd, size - start, start)
    lines = data.rstrip(b"\n").rsplit(b"\n", MAX_RECORDS)  # the newest lines, the rest unsplit in lines[0]
    runs = Runs(path=path)
    if len(lines) > MAX_RECORDS or start:  # older lines, or the first line read from the middle of the file (partial)
        runs.older = lines[0].count(b"\n") + 1
        lines = lines[1:]
    for line in lines:
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            runs.skipped += 1
        else:
            runs.records.append(record)
    return runs


def clear(path: Path | None = None) -> int:
    """Empty the store (default :func:`store_path`) under the writers' lock; return the records it held.

    Raises OSError: the file cannot be opened for writing."""
    path = path or store_path()
    if not path.exists():
        return 0
    held = len(read(path).records)
    with _locked(path, os.O_WRONLY, fcntl.LOCK_EX) as fd:
        os.ftruncate(fd, 0)
    return held


def record(
    *,
    source: str,
    device: dict[str, Any],
    model: dict[str, Any],
    plan: dict[str, Any],
    seq_len: int,
    predicted: dict[str, Any],
    measured: dict[str, Any],
    notes: str = "",
) -> dict[str, Any]:
    """A store record (see the module docstring).

    ``device``: ``type`` (cuda / cpu), ``name`` (the GPU's name, or the CPU model), ``count``, ``driver``;
    ``model``: ``id``, ``task``; ``plan``: :class:`advisor.core.plan.Plan` as a dict; ``predicted`` and ``measured``:
    ``peak_bytes``, ``reserved_bytes``, ``device_bytes``, ``step_time_s`` (seconds per optimizer step),
    ``tokens_per_s`` (all devices), ``samples_per_s``, ``mfu`` where known (None otherwise)."""
    return {
        "version": RECORD_VERSION,
        "date": now(),
        "source": source,
        "device": device,
        "libraries": library_versions(),
        "model": model,
        "plan": plan,
        "seq_len": seq_len,
        "predicted": predicted,
        "measured": measured,
        "notes": notes,
    }


_FIGURES = ("peak_bytes", "reserved_bytes", "device_bytes", "step_time_s", "tokens_per_s", "samples_per_s", "mfu")


def figures(source: Any) -> dict[str, Any]:
    """The figures of :data:`_FIGURES` an object or a dict has (absent ones: None)."""
    get = source.get if isinstance(source, dict) else (lambda k: getattr(source, k, None))
    return {k: get(k) for k in _FIGURES}


def validation_records(report: Any, device: dict[str, Any]) -> list[dict[str, Any]]:
    """The store records of a :class:`advisor.measure.report_models.ValidationReport`: one per trial that measured
    a step time (an out-of-memory trial, a failed one: none)."""
    out = []
    for trial in report.trials:
        measured = trial.measured
        if measured is None or measured.step_time_s is None:
            continue
        predicted = {**figures(trial.predicted.memory), **figures(trial.predicted.speed)}
        out.append(
            record(
                source=SOURCE_VALIDATE,
                device=device,
                model={"id": report.model, "task": report.task},
                plan=trial.plan.model_dump(mode="json"),
                seq_len=report.workload.seq_len,
                predicted=predicted,
                measured=figures(measured),
                notes=f"validate trial: {trial.role}",
            )
        )
    return out


def record_validation(report: Any, device: dict[str, Any]) -> str | None:
    """Append a validation's trials to the store; return a warning line when the store cannot be written (the
    report is never lost for it), else None."""
    try:
        for rec in validation_records(report, device):
            append(rec)
    except (OSError, ValueError) as err:
        return f"the trials were not added to the local store of runs ({store_path()}): {err}"
    return None
