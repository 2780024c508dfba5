"""Issue 45: a lean base install. torch and transformers are the 'trial' extra: the fast path (recommend, compare,
estimate, profile, probe) answers without them, and a command that needs them says in one line which pip install
adds them (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.core import extras
from advisor.core.errors import ExitCode
from advisor.core.extras import MissingExtraError, require
from cli_runner import ENV, ROOT, advisor

#: Runs each command line through the CLI in a process where torch and transformers cannot be imported (as in a base
#: install), and prints {command: [exit code, stderr's lines]}.
_WITHOUT_THE_TRIAL_EXTRA = """
import contextlib, io, json, sys
sys.modules.update(torch=None, transformers=None)  # import torch: ImportError; find_spec('torch'): None
from advisor.app.cli import run
results = {}
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = run(argv)
    results[" ".join(argv)] = [code, err.getvalue().splitlines()]
print(json.dumps(results))
"""


def test_require_names_the_pip_install_of_the_missing_extra(monkeypatch) -> None:
    monkeypatch.setattr(extras, "find_spec", lambda name: None if name == "transformers" else object())
    with pytest.raises(MissingExtraError) as err:
        require("trial", "advisor validate")
    assert str(err.value) == (
        "advisor validate needs transformers (advisor's 'trial' extra, not in the base install): "
        "pip install -e '.[trial]' in advisor's folder"
    )
    assert err.value.exit_code == ExitCode.USAGE
    monkeypatch.setattr(extras, "find_spec", lambda name: object())
    require("trial", "anything")  # all there: nothing said


def test_validate_without_torch_is_one_line_and_exit_2(monkeypatch) -> None:
    monkeypatch.setattr(extras, "find_spec", lambda name: None if name in ("torch", "transformers") else object())
    out = advisor("validate", "--model", "gpt2", "--steps", "1")
    assert out.returncode == ExitCode.USAGE and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line == (
        "advisor: error: advisor validate (trial steps on this machine) needs torch and transformers "
        "(advisor's 'trial' extra, not in the base install): pip install -e '.[trial]' in advisor's folder"
    )


@pytest.mark.subprocess
def test_the_fast_path_answers_without_torch_and_transformers(tmp_path) -> None:
    unknown = tmp_path / "config.json"  # a model type with no closed form: counted on the meta device by transformers
    unknown.write_text(json.dumps({"model_type": "no-closed-form", "hidden_size": 64}))
    commands = [
        ["recommend", "--model", "gpt2"],
        ["recommend", "--model", "gpt2", "--gpu", "a100-80gb"],
        ["compare", "--model", "gpt2", "--gpu", "a100-80gb", "--gpu", "t4"],
        ["estimate", "--model", "gpt2", "--gpu", "t4", "--micro-batch-size", "4"],
        ["profile", "--model", "meta-llama/Llama-2-7b-hf"],
        ["probe", "--gpu", "h100-sxm:8"],
        ["estimate", "--model", "gpt2", "--gpu", "t4", "--simulate"],
        ["validate", "--model", "gpt2"],
        ["profile", "--model", str(unknown)],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_THE_TRIAL_EXTRA, json.dumps(commands)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    for argv in commands[:6]:
        assert results[" ".join(argv)][0] == 0, results[" ".join(argv)]
    for argv in commands[6:]:
        code, lines = results[" ".join(argv)]
        assert code == ExitCode.USAGE and len(lines) == 1 and "pip install -e '.[trial]'" in lines[0], (argv, lines)
