"""The tracker's bookkeeping, without a model (advisor/integrations/tracker.py); its cost per step is measured in
benchmarks/tracker_overhead.py, not here (no timed unit tests)."""

from __future__ import annotations

from advisor.integrations import Tracker
from advisor.measure import run_store

from helpers import cpu_plan

PLAN = {
    "plan": cpu_plan().model_dump(mode="json"),
    "memory": {"peak_bytes": 2**30, "device_bytes": 2**30},
    "speed": {"step_time_s": 1e-3, "tokens_per_s": 64_000.0, "samples_per_s": 1000.0},
}


def test_a_window_of_steps_is_summarised_without_the_store() -> None:
    t = Tracker(PLAN, warmup_steps=2, measure_steps=2000, store=False)
    for _ in range(2002):
        t.step(tokens=64)
    assert t.summary is not None and t.record["measured"]["steps"] == 2000
    assert t.record["seq_len"] == 64 and run_store.read().records == []


def test_an_unfinished_window_is_reported_at_close_and_stored() -> None:
    with Tracker(PLAN, warmup_steps=1, measure_steps=100) as t:
        for _ in range(4):
            t.step()
    assert "over 3 steps after 1 warm-up" in t.summary
    (stored,) = run_store.read().records
    assert stored["measured"]["tokens_per_step"] == 64 and stored["predicted"]["step_time_s"] == 1e-3


def test_a_run_shorter_than_the_warm_up_reports_nothing() -> None:
    with Tracker(PLAN, warmup_steps=3) as t:
        t.step()
    assert t.summary is None and run_store.read().records == []


def test_a_calibrated_plan_stores_the_models_own_prediction() -> None:
    calibrated = {
        **PLAN,
        "speed": {
            "step_time_s": 2e-3,
            "tokens_per_s": 32_000.0,
            "samples_per_s": 500.0,
            "local_calibration": {"step_time_ratio": 2.0, "runs": 3},
        },
    }
    with Tracker(calibrated, warmup_steps=1, measure_steps=2) as t:
        for _ in range(3):
            t.step()
    assert "step 0.002 s vs" in t.summary  # compared with what the user was shown
    predicted = run_store.read().records[0]["predicted"]
    assert predicted["step_time_s"] == 1e-3 and predicted["tokens_per_s"] == 64_000.0  # the ratios never compound
