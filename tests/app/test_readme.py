"""The README stays true: its command blocks are run and their shown output compared, its JSON excerpts and
emitted files are checked against the commands that make them, and its links resolve inside the repository.

A fenced block whose first line starts with ``$ `` is a console block: each ``$ COMMAND`` line runs (``advisor``
and ``python`` are this checkout's, ``HF_HUB_OFFLINE=1``, ``COLUMNS=80`` unless the command sets it, in a fresh
folder shared by the README's commands in order) and the lines after it are its output (stdout then stderr); a last
line ``…`` shows only the output's first lines. A plain ``advisor ARGS`` (with ``NAME=VALUE`` assignments before
it, if any) runs in this interpreter through ``advisor.app.cli.run`` (``tests/cli_runner.py``); a line that needs a
shell (a pipe, a redirection, ``python``, ``cd``) runs in bash, and its block is marked ``subprocess``. A marker comment just before a block says
more:

- ``<!-- readme: measured -->``: the output is measured on some machine (timings): the commands' flags are
  parsed, not run;
- ``<!-- readme: excerpt of COMMAND -->``: every string of the JSON excerpt is in COMMAND's output;
- ``<!-- readme: file PATH of COMMAND -->``: the block is the file PATH that COMMAND writes.

After a deliberate change of output, ``python tests/app/test_readme.py --update`` rewrites the console blocks'
output in README.md (review the diff).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

if __name__ == "__main__":  # python tests/app/test_readme.py --update: tests/ (the helpers), the checkout's advisor
    sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

from cli_runner import ROOT, run_cli  # noqa: E402

README = ROOT / "README.md"
FENCE = re.compile(r"(?:<!-- readme: (?P<marker>.*?) -->\n)?^```[\w-]*\n(?P<body>.*?)^```", re.S | re.M)
ELLIPSIS = "…"


def _blocks(text: str) -> list[re.Match]:
    return list(FENCE.finditer(text))


def _console_blocks(text: str) -> list[re.Match]:
    return [m for m in _blocks(text) if m["body"].startswith("$ ")]


def _steps(body: str) -> list[tuple[str, list[str]]]:
    """(command, shown output lines) of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


class Shell:
    """A folder where the README's commands run in order, with ``advisor`` and ``python`` on the PATH."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        bin_dir = folder / ".bin"
        bin_dir.mkdir()
        (bin_dir / "advisor").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m advisor "$@"\n')
        (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        for tool in bin_dir.iterdir():
            tool.chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT),
            "HF_HUB_OFFLINE": "1",
            "COLUMNS": "80",
        }

    def run(self, command: str) -> tuple[int, str]:
        """Exit code and stdout + stderr of ``command``: in this interpreter when it is a plain ``advisor ARGS``."""
        plain = in_process(command)
        if plain is not None:
            assignments, argv = plain
            code, out, err = run_cli(argv, env={**self.env, **assignments}, cwd=self.folder)
            return code, out + err
        out = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, cwd=self.folder, env=self.env, timeout=300
        )
        return out.returncode, out.stdout + out.stderr


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def in_process(command: str) -> tuple[dict[str, str], list[str]] | None:
    """``({NAME: VALUE}, ARGS)`` of ``[NAME=VALUE ...] advisor ARGS`` without anything else a shell would do (a pipe,
    a redirection, a list, a substitution, a glob); None for a line that needs bash."""
    if re.search(r"[|&;<>()$`*?\[\]{}~\\\n#]", command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    assignments = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        assignments[name] = value
    if not words or words[0] != "advisor":
        return None
    return assignments, words[1:]


def _needs_a_shell(index: int) -> bool:
    """Whether block ``index`` runs a command in bash (its marker's command, or one of its ``$`` lines)."""
    block = _blocks(README.read_text(encoding="utf-8"))[index]
    marker, body = block["marker"] or "", block["body"]
    if marker == "measured":
        return False
    if marker.startswith("excerpt of "):
        return in_process(marker.removeprefix("excerpt of ")) is None
    if marker.startswith("file "):
        return in_process(marker.removeprefix("file ").partition(" of ")[2]) is None
    return body.startswith("$ ") and any(in_process(command) is None for command, _ in _steps(body))


@pytest.fixture(scope="module")
def shell():
    with tempfile.TemporaryDirectory() as folder:
        yield Shell(Path(folder))


def _matches(shown: list[str], got: list[str]) -> bool:
    shown = [line.rstrip() for line in shown]
    got = [line.rstrip() for line in got]
    if shown and shown[-1] == ELLIPSIS:
        return got[: len(shown) - 1] == shown[:-1]
    while got and not got[-1]:
        got.pop()
    return got == shown


def _output(shell: Shell, command: str) -> list[str]:
    _code, out = shell.run(command)
    return out.rstrip("\n").split("\n") if out else []


def _marks(index: int) -> list:
    """``subprocess`` for a block with a line bash runs; ``slow`` for one running ``advisor compare`` (a planner search
    per GPU: seconds) or a simulated step (``--simulate``, ``--timeline``: torch and fake tensors)."""
    body = _blocks(README.read_text(encoding="utf-8"))[index]["body"]
    slow = "$ advisor compare " in body or "--simulate" in body or "--timeline" in body
    return ([pytest.mark.subprocess] if _needs_a_shell(index) else []) + ([pytest.mark.slow] if slow else [])


@pytest.mark.parametrize(
    "index", [pytest.param(i, marks=_marks(i)) for i in range(len(_blocks(README.read_text(encoding="utf-8"))))]
)
def test_block(shell: Shell, index: int) -> None:
    from advisor.app.cli import build_parser

    block = _blocks(README.read_text(encoding="utf-8"))[index]
    marker, body = block["marker"] or "", block["body"]
    if marker.startswith("excerpt of "):
        _code, out = shell.run(marker.removeprefix("excerpt of "))
        for value in re.findall(r'"((?:[^"\\]|\\.)*)"', body):
            if value not in ("...", "…"):
                assert f'"{value}"' in out, f"README excerpt: {value!r} is not in the output of {marker}"
        return
    if marker.startswith("file "):
        path, _, command = marker.removeprefix("file ").partition(" of ")
        code, out = shell.run(command)
        assert code == 0, out
        assert (shell.folder / path).read_text(encoding="utf-8") == body, f"README shows another {path}"
        return
    if not body.startswith("$ "):
        return  # not a command block: a synopsis, a program, a file shown for reading
    for command, shown in _steps(body):
        if marker == "measured":
            words = shlex.split(command)
            assert words[0] == "advisor", command
            build_parser().parse_args(words[1:])  # the flags exist (argparse exits on a bad one)
            continue
        got = _output(shell, command)
        assert _matches(shown, got), "README shows:\n" + "\n".join(shown) + "\n\nthe command prints:\n" + "\n".join(got)


def test_links_resolve_inside_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not t.startswith(("http://", "https://", "#"))]
    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    paths = [
        p for p in re.findall(r"`([\w.-]+/[\w./-]+\.(?:py|md|json|txt|svg|yaml))", text) if p.split("/")[0] in tops
    ]
    missing = [t for t in targets + paths if not (ROOT / t.split("#")[0].split(":")[0]).exists()]
    assert targets and paths and not missing, missing


def test_facts_in_the_prose_are_today_s() -> None:
    from advisor.engine.schema import SCHEMA_VERSION
    from rules import REGISTRY

    text = README.read_text(encoding="utf-8")
    assert f"`schema_version` (now {SCHEMA_VERSION})" in text
    assert f"lists all {len(REGISTRY)}" in text


@pytest.mark.slow
def test_the_rationales_the_prose_quotes_are_today_s() -> None:
    """The prose quotes a recommendation's parallelism rationale and the expert-parallel comparison's figures: they
    are what advisor prints now (the README is a promise, prose included)."""
    from advisor.app.api import recommend

    text = " ".join(README.read_text(encoding="utf-8").split())
    multi_node = recommend("meta-llama/Llama-2-7b-hf", gpu="a100-40gb:2", nodes=4)
    quoted = multi_node.settings["parallelism"].rationale.split("; ", 1)[1]
    assert f'"{quoted}"' in text
    plan = multi_node.plan
    assert f"micro-batch {plan.micro_batch_size} × {plan.gradient_accumulation_steps} accumulation × 8 GPUs" in text
    mixtral = recommend("mistralai/Mixtral-8x7B-v0.1", gpu="a100-80gb:8", method="full")
    rationale = mixtral.settings["expert_parallel"].rationale
    chosen = re.search(
        r"fsdp-full-shard: ([\d.]+ GiB) per GPU, communication ([\d.]+ s) of the ([\d.]+ s) step, "
        r"est\. ([\d,]+) tokens/s",
        rationale,
    )
    other = re.search(
        r"expert parallel 8 with (fsdp-[\w-]+): ([\d.]+ GiB) per GPU, .*est\. ([\d,]+) tokens/s", rationale
    )
    assert chosen and other, rationale
    assert (
        f"holds {chosen[1]} per GPU at est. {chosen[4]} tokens/s, {chosen[2]} of its {chosen[3]} step communicating"
    ) in text
    strategy = {"fsdp-full-shard": "FULL_SHARD", "fsdp-shard-grad-op": "SHARD_GRAD_OP"}[other[1]]
    assert f"expert parallel 8 with {strategy} holds {other[2]} at est. {other[3]} tokens/s" in text


def update() -> int:
    """Rewrite the console blocks' output with what the commands print now."""
    text = README.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as folder:
        shell = Shell(Path(folder))
        pieces, last, changed = [], 0, 0
        for block in _blocks(text):
            marker, body = block["marker"] or "", block["body"]
            if marker.startswith("file "):
                shell.run(marker.removeprefix("file ").partition(" of ")[2])
            if not body.startswith("$ ") or marker == "measured":
                continue
            lines = []
            for command, shown in _steps(body):
                got = _output(shell, command)
                if shown and shown[-1] == ELLIPSIS:
                    got = got[: len(shown) - 1] + [ELLIPSIS]
                lines += [f"$ {command}", *[line.rstrip() for line in got]]
            new = "\n".join(lines) + "\n"
            changed += new != body
            pieces += [text[last : block.start("body")], new]
            last = block.end("body")
        README.write_text("".join(pieces) + text[last:], encoding="utf-8")
    print(f"updated {changed} console block(s) in {README}")
    return 0


if __name__ == "__main__" and "--update" in sys.argv:
    sys.exit(update())
