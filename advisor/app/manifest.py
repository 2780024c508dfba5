"""The manifest of an ``--emit`` folder (``.advisor-emitted.json``): which files advisor wrote there, so that a later
``--emit`` of the same target removes the files of the earlier set that the new one does not write (issue 44: a
``lora_config.json`` left beside a full fine-tuning set made a script that loads adapters when the file exists train
LoRA). Only names advisor writes are ever removed, and only when the manifest says advisor wrote them: a file of the
user's own, or a hostile manifest naming another path, is never touched.
"""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST_FILE = ".advisor-emitted.json"  #: beside the emitted files; written with them, all or nothing


def _listed(folder: Path) -> set[str]:
    """The file names the folder's manifest lists (none when it is missing, unreadable or not advisor's)."""
    from probes.config_check import read_bounded

    try:
        data = json.loads(read_bounded(folder / MANIFEST_FILE))
    except (OSError, ValueError, RecursionError):
        return set()
    files = data.get("files") if isinstance(data, dict) else None
    return {name for name in files if isinstance(name, str)} if isinstance(files, list) else set()


def plan_folder(
    folder: Path, groups: dict[str, tuple[str, ...]], wanted: list[str], written: list[str]
) -> tuple[set[str], str]:
    """What an ``--emit`` of the targets ``wanted`` (their file names: ``groups``) that writes ``written`` does to
    ``folder``: the names of an earlier set to remove (listed in the manifest, of a target being written, not
    written now) and the new manifest's text (the files advisor's sets left there, this one's included)."""
    listed = _listed(folder)
    owned = {name for target in wanted for name in groups[target]}
    stale = {name for name in listed & owned if name not in written}
    kept = {
        name
        for name in listed - stale
        if name in {n for names in groups.values() for n in names} and (folder / name).is_file()
    }
    text = json.dumps({"written_by": "advisor recommend --emit", "files": sorted(kept | set(written))}, indent=2)
    return stale, text + "\n"
