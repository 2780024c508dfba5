"""Byte-identical outputs of recommend / estimate / emit (and their refusals) across refactors.

The commands are in ``tests/golden/commands.txt`` and ``emit_commands.txt``; the recorded exit
codes, stdout, stderr and emitted files in ``tests/golden/outputs.json``. A change that means to
change an output re-records them (``python tests/test_golden.py --record``) and says why in its commit.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "160"}


def _lines(name: str) -> list[str]:
    text = (GOLDEN / name).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def run(line: str) -> dict:
    """Exit code, stdout and stderr of ``advisor LINE``."""
    out = subprocess.run([sys.executable, "-m", "advisor", *shlex.split(line)], capture_output=True, text=True,
                         env=ENV, cwd=ROOT, timeout=300)
    return {"exit": out.returncode, "stdout": out.stdout, "stderr": out.stderr}


def run_emit(line: str) -> dict:
    """``advisor recommend LINE --emit all --out DIR``: the exit code and every written file."""
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run([sys.executable, "-m", "advisor", "recommend", *shlex.split(line), "--emit", "all",
                              "--out", folder, "--json"], capture_output=True, text=True, env=ENV, cwd=ROOT,
                             timeout=300)
        files = {p.name: p.read_text(encoding="utf-8") for p in sorted(Path(folder).iterdir())}
    return {"exit": out.returncode, "files": files}


def _recorded() -> dict:
    return json.loads((GOLDEN / "outputs.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("line", _lines("commands.txt"))
def test_output_unchanged(line: str) -> None:
    expected = _recorded()["commands"][line]
    got = run(line)
    assert got["exit"] == expected["exit"], got["stderr"]
    assert got["stderr"] == expected["stderr"]
    assert got["stdout"] == expected["stdout"]


@pytest.mark.parametrize("line", _lines("emit_commands.txt"))
def test_emitted_files_unchanged(line: str) -> None:
    expected = _recorded()["emit"][line]
    got = run_emit(line)
    assert got == expected


if __name__ == "__main__" and "--record" in sys.argv:
    data = {"commands": {line: run(line) for line in _lines("commands.txt")},
            "emit": {line: run_emit(line) for line in _lines("emit_commands.txt")}}
    (GOLDEN / "outputs.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"recorded {len(data['commands'])} commands and {len(data['emit'])} emits")
