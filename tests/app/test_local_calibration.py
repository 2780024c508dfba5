"""Recommendations calibrated on this machine (advisor/engine/local_calibration.py, advisor/app/local_runs.py): the
median measured / predicted step time of >= 3 comparable runs in the local store (ADVISOR_HOME: the test's own empty
folder, tests/conftest.py), bounded to [0.5, 2], on the card and in the JSON; --no-local-calibration turns it off."""

from __future__ import annotations

import json

import pytest

from advisor.core.errors import ExitCode
from advisor.engine.local_calibration import MIN_RUNS, calibration, step_class
from advisor.measure import run_store

from cli_runner import run_cli
from helpers import cpu_plan

GPU = ["--model", "gpt2", "--gpu", "a100-80gb"]


def _record(plan: dict, device: str, predicted: float, measured: float) -> dict:
    return run_store.record(
        source=run_store.SOURCE_VALIDATE,
        device={"type": "cuda", "name": device, "count": 1, "driver": None},
        model={"id": "gpt2", "task": "causal-lm"},
        plan=plan,
        seq_len=1024,
        predicted={"step_time_s": predicted},
        measured={"step_time_s": measured},
    )


def test_the_median_of_comparable_runs_bounded() -> None:
    plan = cpu_plan()
    same = plan.model_dump(mode="json")
    records = [_record(same, "X", 1.0, m) for m in (1.1, 1.2, 5.0)]  # one odd run does not move the median
    records += [_record({**same, "method": "lora"}, "X", 1.0, 9.0), _record(same, "Y", 1.0, 9.0)]  # not comparable
    c = calibration(records, plan, "X")
    assert c.runs == 3 and c.step_time_ratio == pytest.approx(1.2) and not c.bounded
    assert c.describe() == "calibrated on 3 runs on this machine: speed ×0.83"
    assert calibration(records[: MIN_RUNS - 1], plan, "X") is None
    assert calibration([_record(same, "NVIDIA A100-SXM4-80GB", 1.0, 1.5)] * 3, plan, "NVIDIA A100 SXM4 80GB").runs == 3
    far = calibration([_record(same, "X", 1.0, 10.0)] * 3, plan, "X")
    assert far.step_time_ratio == 2.0 and far.bounded
    assert step_class(plan) == f"full/replicated/{plan.attention}" and step_class({"method": "full"}) is None


def _recommend(*extra: str) -> dict:
    code, out, err = run_cli(["recommend", *GPU, "--json", *extra])
    assert code == ExitCode.OK, err
    return json.loads(out)


def test_recommend_estimate_and_compare_scale_by_the_stored_ratio() -> None:
    before = _recommend()
    assert before["speed"]["local_calibration"] is None
    for measured in (1.2, 1.25, 1.3):
        run_store.append(_record(before["plan"], before["hardware"]["gpus"][0]["name"], 1.0, measured))
    after = _recommend()
    cal = after["speed"]["local_calibration"]
    assert cal["runs"] == 3 and cal["step_time_ratio"] == pytest.approx(1.25)
    assert after["speed"]["step_time_s"] == pytest.approx(before["speed"]["step_time_s"] * 1.25)
    assert after["speed"]["tokens_per_s"] == pytest.approx(before["speed"]["tokens_per_s"] / 1.25)
    assert _recommend("--no-local-calibration")["speed"] == before["speed"]
    code, card, _ = run_cli(["recommend", *GPU])
    assert code == ExitCode.OK and "calibrated on 3 runs on this machine: speed ×0.80" in card

    plan = before["plan"]
    flags = [
        "--micro-batch-size",
        str(plan["micro_batch_size"]),
        "--gradient-accumulation-steps",
        str(plan["gradient_accumulation_steps"]),
        "--precision",
        plan["precision"],
        "--attention",
        plan["attention"],
    ]
    code, out, _ = run_cli(["estimate", *GPU, "--json", *flags])
    est = json.loads(out)
    assert code == ExitCode.OK and est["speed"]["local_calibration"]["runs"] == 3
    code, out, _ = run_cli(["estimate", *GPU, "--json", "--no-local-calibration", *flags])
    assert json.loads(out)["speed"]["local_calibration"] is None
    code, text, _ = run_cli(["estimate", *GPU, *flags])
    assert "calibrated on 3 runs" in text

    code, out, _ = run_cli(["compare", *GPU, "--json"])
    (row,) = json.loads(out)["rows"]
    assert code == ExitCode.OK and row["local_calibration"]["runs"] == 3
    assert row["step_time_s"] == pytest.approx(after["speed"]["step_time_s"])
    code, out, _ = run_cli(["compare", *GPU, "--json", "--no-local-calibration"])
    assert json.loads(out)["rows"][0]["local_calibration"] is None
