"""Hostile inputs, round 3 (issue 44): one test per cause (a hypothesis property where a class of inputs is meant).

The CLI runs in-process (:func:`tests.app.test_hostile_inputs.cli`); the few cases that need a process of their own
(closed streams, encodings, signals during imports) are marked subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from advisor.core.errors import ExitCode
from advisor.core.text import MAX_LINE
from test_hostile_inputs import TINY, assert_clean, cli

ROOT = Path(__file__).resolve().parents[2]
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])
FORGED = "\x1b]0;owned\x07\x1b[2J\nadvisor: error: forged"


def _one_clean_line(stderr: str) -> None:
    """Item 2: what a file said reaches the terminal as one printable line of bounded length."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].isprintable() and len(lines[0]) <= 12 * MAX_LINE, lines[0][:300]


# -- 2. strings from files reach the terminal through one function ----------------------------------------------


@FEW
@given(text=st.text(min_size=1, max_size=300))
@example(text=FORGED)
@example(text="x" * 2**20)  # a 1 MiB model_type was echoed whole
def test_a_files_strings_reach_the_terminal_escaped_and_cut(tmp_path_factory, text: str) -> None:
    folder = tmp_path_factory.mktemp("shown")
    cases = {"model_type": {"model_type": text},
             "quant_method": {**TINY, "quantization_config": {"quant_method": text, "bits": 4}}}
    for name, config in cases.items():
        (folder / name).mkdir()
        (folder / name / "config.json").write_text(json.dumps(config))
    (folder / "adapter").mkdir()
    (folder / "adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": text,
                                                                        "peft_type": "LORA", "r": 8}))
    for name in ("model_type", "adapter"):
        code, _, err, seconds = cli("profile", "--model", str(folder / name))
        assert_clean(code, err, seconds)
        _one_clean_line(err)
    code, out, err, seconds = cli("recommend", "--model", str(folder / "quant_method"), "--gpu", "a100-80gb",
                                  "--method", "full", "--seq-len", "32", "--global-batch-size", "4")
    assert "\x1b" not in out + err
    if code != ExitCode.OK:
        _one_clean_line(err)
