"""Byte-identical outputs of recommend / estimate / emit (and their refusals) across refactors.

The commands are in ``tests/golden/commands.txt`` and ``emit_commands.txt``; the recorded exit
codes, stdout, stderr and emitted files in ``tests/golden/outputs.json``. Each command runs in this interpreter
through ``advisor.app.cli.run`` (``tests/cli_runner.py``: the environment, working directory and captured streams
of the ``python -m advisor`` subprocess the outputs were recorded from, ``COLUMNS=160``); the bytes must not
change. A change that means to change an output re-records them (``python tests/app/test_golden.py --record``) and
says why in its commit.
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path

import pytest

if __name__ == "__main__":  # python tests/app/test_golden.py --record: tests/ (the helpers), the checkout's advisor
    sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

from cli_runner import ENV, ROOT, run_cli  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"


def _lines(name: str) -> list[str]:
    text = (GOLDEN / name).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def run(line: str) -> dict:
    """Exit code, stdout and stderr of ``advisor LINE``."""
    code, stdout, stderr = run_cli(shlex.split(line), env=ENV, cwd=ROOT)
    return {"exit": code, "stdout": stdout, "stderr": stderr}


def run_emit(line: str) -> dict:
    """``advisor recommend LINE --emit all --out DIR``: the exit code and every written file."""
    with tempfile.TemporaryDirectory() as folder:
        code, _stdout, _stderr = run_cli(
            ["recommend", *shlex.split(line), "--emit", "all", "--out", folder, "--json"], env=ENV, cwd=ROOT
        )
        files = {p.name: p.read_text(encoding="utf-8") for p in sorted(Path(folder).iterdir())}
    return {"exit": code, "files": files}


def _recorded() -> dict:
    return json.loads((GOLDEN / "outputs.json").read_text(encoding="utf-8"))


#: the commands that take over about 2 s on 2 cores (measured, --durations): out of make test-fast
SLOW = {
    "recommend --model gpt2 --gpu rtx-3090:2 --objective memory --json",
    "recommend --model mistralai/Mixtral-8x7B-v0.1 --gpu h100-sxm:8 --seq-len 2048 --json",
    "recommend --model mistralai/Mixtral-8x7B-v0.1 --gpu a100-80gb:8",
}


def _params(name: str) -> list:
    return [pytest.param(line, marks=[pytest.mark.slow] if line in SLOW else []) for line in _lines(name)]


@pytest.mark.parametrize("line", _params("commands.txt"))
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


@pytest.mark.subprocess
@pytest.mark.parametrize("line", [_lines("commands.txt")[0], "recommend --model gpt2 --gpu a100-80gb --seq-len 0"])
def test_the_command_in_its_own_process_prints_the_recorded_bytes(line: str) -> None:
    """The goldens run in this interpreter; a plan card and a refusal also run as ``python -m advisor``, the process
    the outputs were recorded from, so that the in-process runner cannot drift from it unnoticed."""
    from cli_runner import advisor_subprocess

    expected = _recorded()["commands"][line]
    out = advisor_subprocess(*shlex.split(line), env=ENV, timeout=300)
    assert (out.returncode, out.stdout, out.stderr) == (expected["exit"], expected["stdout"], expected["stderr"])


if __name__ == "__main__" and "--record" in sys.argv:
    data = {
        "commands": {line: run(line) for line in _lines("commands.txt")},
        "emit": {line: run_emit(line) for line in _lines("emit_commands.txt")},
    }
    (GOLDEN / "outputs.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"recorded {len(data['commands'])} commands and {len(data['emit'])} emits")
