"""Writing output files whole or not at all, to targets checked before the work starts."""

from __future__ import annotations

import errno
import os
import secrets
import stat
import sys
import tempfile
from pathlib import Path

from advisor.core.errors import OutputError

#: errno values of a write that failed for want of room or a device, or to a closed stdout (not a bug): exit OUTPUT,
#: one line.
WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EDQUOT, errno.EBADF}


def silence_stdout() -> None:
    """Point stdout at /dev/null after it failed, so that the interpreter's last flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout has no file descriptor (captured in a test): nothing flushes at exit
        pass


def check_target(path: str | Path) -> Path:
    """Refuse, before any work, an output ``path`` that could not be written whole: its folder is missing or not
    writable, or it exists and is not a regular file (a directory, a device such as /dev/full, a FIFO: replacing
    it by a file would destroy it, writing into it would not be atomic).

    Raises:
        OutputError: one line naming the path and why.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:  # a name too long, a folder in the path that is a file
        raise OutputError(f"cannot write {path}: {err.strerror}") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise OutputError(f"cannot write {path}: it is {kind} (advisor replaces only regular files)")
    if not folder.is_dir():
        raise OutputError(f"cannot write {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: folder {folder} is not writable")
    return path


def write_atomic(path: str | Path, text: str, *, executable: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically: a temporary file in the same folder, fsync, then
    ``os.replace`` (POSIX rename semantics), so readers see the old file or the whole new one.

    Raises:
        OutputError: the target is refused (:func:`check_target`) or the write fails (disk full, file size limit).
    """
    return write_set({Path(path): text}, executable={Path(path)} if executable else set())[0]


def write_set(
    files: dict[Path, str], *, executable: set[Path] = frozenset(), remove: set[Path] = frozenset()
) -> list[Path]:
    """Write several files, and remove ``remove`` (files of an earlier set), all or nothing: every target checked,
    every text written and synced to a temporary file beside its target, and only then each target moved aside and
    its new file renamed into place (:func:`_swap_in`); any failure, a rename refused by the file system included
    (an immutable file, someone else's file in a sticky folder such as /tmp), puts every target back as it was.

    Raises:
        OutputError: a refused target (:func:`check_target`), a failed write or rename, one line.
    """
    for path in [*files, *remove]:
        check_target(path)
    umask = os.umask(0)
    os.umask(umask)
    temporary: dict[Path, str] = {}
    try:
        for path, text in files.items():
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            except OSError as err:
                raise OutputError(f"cannot write {path}: {err.strerror}") from None
            temporary[path] = tmp
            mode = 0o777 if path in executable else 0o666
            os.chmod(tmp, mode & ~umask)  # mkstemp makes 0600; a written file gets the usual mode
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as err:  # ENOSPC, EFBIG (ulimit -f), EIO
                raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
        _swap_in(temporary, set(remove) - set(files))
    except BaseException:
        for tmp in temporary.values():
            Path(tmp).unlink(missing_ok=True)
        raise
    return list(files)


def _swap_in(temporary: dict[Path, str], remove: set[Path]) -> None:
    """Rename each staged file onto its target and remove the ``remove`` files, all or nothing: each existing
    target is first renamed aside (a hidden name beside it), so that a failure at any point (a rename the file
    system refuses, Ctrl-C) can put back every file as it was; the set aside files are deleted once all is done.

    Raises:
        OutputError: a target that became a directory or a device, or a rename that failed (the set is rolled back).
    """
    done: list[tuple[Path, str | None, bool]] = []  # (target, where it was set aside, its new file is in place)
    path = None
    try:
        for path in [*temporary, *sorted(remove)]:
            check_target(path)  # nothing became a directory or a device while the texts were written
            aside = None
            if os.path.lexists(path):
                aside = str(path.with_name(f".{path.name}.{secrets.token_hex(6)}.old"))
                os.rename(path, aside)
            done.append((path, aside, False))
            if path in temporary:
                os.replace(temporary[path], path)
                done[-1] = (path, aside, True)
    except BaseException as err:
        _roll_back(done)
        if isinstance(err, OSError):
            raise OutputError(
                f"cannot replace {path}: {err.strerror or err} (no file of the set was changed)"
            ) from None
        raise
    for _, aside, _ in done:
        if aside is not None:
            Path(aside).unlink(missing_ok=True)


def _roll_back(done: list[tuple[Path, str | None, bool]]) -> None:
    """Undo :func:`_swap_in`'s renames, last first (best effort: a file that cannot be put back stays set aside)."""
    for path, aside, placed in reversed(done):
        try:
            if placed:
                path.unlink(missing_ok=True)
            if aside is not None:
                os.rename(aside, path)
        except OSError:
            pass
