"""Issue 45: trials that respect the clock. ``validate`` with its defaults on the CPU started a trial predicted at
5,179 s, and the first Ctrl-C ("stopping at the next step boundary") had not stopped it 9 minutes later. Now a time
budget (``--max-seconds``) shortens the trials and ends one still running, and the first Ctrl-C is answered within
2 s: the step under way is cut and the partial report says so."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.slow  # the report reads torch's version

pytest.importorskip("torch")
pytest.importorskip("transformers")

from advisor.app import api  # noqa: E402
from advisor.core.errors import ExitCode  # noqa: E402
from advisor.measure import trial as trial_module  # noqa: E402
from advisor.measure.outcome import StepUpdate  # noqa: E402
from advisor.measure.session import CUT_AFTER_S, Session  # noqa: E402
from advisor.measure.validation import ValidationReport  # noqa: E402
from probes.hardware import HardwareProfile, read_host  # noqa: E402

from cli_runner import ENV  # noqa: E402
from helpers import TINY_GPT2  # noqa: E402

CPU = HardwareProfile(source="none", host=read_host())
#: GPT-2's shape at 2 layers, 1024 wide, a 50,000-token vocabulary: a step of 4 x 256 tokens takes seconds on 2 cores
WIDE = {**TINY_GPT2, "n_embd": 1024, "n_head": 8, "vocab_size": 50_000}


@pytest.fixture
def tiny(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_GPT2))
    return str(path)


def test_the_budget_shortens_a_trial_predicted_past_it() -> None:
    session = Session(
        None,
        None,
        steps=10,
        warmup=2,
        max_trials=6,
        memory_limit_bytes=None,
        progress=None,
        stop=threading.Event(),
        config=None,
        max_seconds=100,
    )
    assert session.steps_within_budget(5.0) == 10 and session.warnings == []  # 12 x 5 s: within 100 s
    assert session.steps_within_budget(10.0) == 7  # 100 s // 10 s - 2 warm-up steps
    assert session.steps_within_budget(1000.0) == 1  # at least one timed step
    assert len(session.warnings) == 2
    assert "7 timed step(s) instead of 10" in session.warnings[0] and "--max-seconds 100" in session.warnings[0]
    unlimited = Session(None, None, 10, 2, 6, None, None, threading.Event(), None)
    assert unlimited.steps_within_budget(1e9) == 10 and not unlimited.expired


def _stuck_trial(monkeypatch, finished_steps: int = 2) -> threading.Event:
    """run_trial stand-in: ``finished_steps`` steps, then one that does not end (a long CPU step, blind to the stop
    event); the returned event releases it."""
    release = threading.Event()

    def run_trial(model, plan, seq_len, *, steps, warmup, on_step, stop, **kwargs):
        for step in range(1, finished_steps + 1):
            on_step(
                StepUpdate(
                    step=step, total=steps + warmup, warmup=step <= warmup, step_time_s=0.5, peak_bytes=1000, loss=6.9
                )
            )
        release.wait(60)
        raise AssertionError("the cut trial's result must not be read")

    monkeypatch.setattr(trial_module, "run_trial", run_trial)
    return release


def test_a_stop_cuts_a_step_that_does_not_end_within_a_second(tiny, monkeypatch) -> None:
    release = _stuck_trial(monkeypatch, finished_steps=3)
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    start = time.monotonic()
    try:
        report = api.validate(
            tiny, seq_len=32, global_batch_size=4, steps=10, warmup=2, hardware=CPU, stop=stop, compare=True
        )
    finally:
        release.set()
    assert time.monotonic() - start < 0.5 + CUT_AFTER_S + 1.0
    assert report.interrupted and report.verdict == "incomplete"
    (trial,) = report.trials  # no baseline after a stop
    assert trial.status == "interrupted" and "the step under way was cut" in trial.message
    assert trial.measured.losses == [6.9] * 3 and trial.measured.timed_steps == 1


def test_the_time_budget_ends_a_trial_and_says_so_without_calling_it_interrupted(tiny, monkeypatch) -> None:
    release = _stuck_trial(monkeypatch)
    start = time.monotonic()
    try:
        report = api.validate(
            tiny, seq_len=32, global_batch_size=4, steps=10, warmup=2, hardware=CPU, max_seconds=1.0, compare=True
        )
    finally:
        release.set()
    assert time.monotonic() - start < 1.0 + CUT_AFTER_S + 1.5
    assert not report.interrupted and report.verdict == "incomplete"
    assert report.trials[0].message.startswith("the time budget (--max-seconds 1) ended it")
    assert any("baseline did not run" in w for w in report.warnings)


@pytest.mark.subprocess
def test_the_first_ctrl_c_of_a_cpu_trial_is_answered_within_two_seconds(tmp_path) -> None:
    """A real CPU trial whose steps take seconds: SIGINT in the middle of one; the partial report and exit 130
    come within 2 s (it used to wait for the step boundary)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(WIDE))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advisor",
            "validate",
            "--model",
            str(config),
            "--seq-len",
            "256",
            "--global-batch-size",
            "4",
            "--micro-batch-size",
            "4",
            "--steps",
            "1000",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=tmp_path,
    )
    lines = []
    try:
        for line in proc.stderr:  # the first step done: the next one is under way
            lines.append(line)
            if "warm-up 1/" in line:
                break
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        answered = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, "".join(lines) + stderr
    assert answered < 2.0, f"{answered:.2f} s"
    report = ValidationReport.model_validate_json(stdout)
    assert report.interrupted and report.trials[0].status == "interrupted"
    assert len(report.trials[0].measured.losses) >= 1 and "Traceback" not in stderr
