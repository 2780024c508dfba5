"""benchmarks/speed_fit.py: the runs the speed model's GEMM ceiling and bandwidth share are fitted to."""

from __future__ import annotations

from benchmarks.speed_fit import device_trials, evaluate


def test_the_h100_trials_are_read_once_per_plan_and_priced_near_their_measured_step() -> None:
    trials = device_trials()
    assert len(trials) == 13  # 15 clean trials, two plans measured twice
    assert len({(m, s, d) for m, s, _, _, d in trials}) == 13
    # the plain LoRA trial (Llama-3.1-8B, micro-batch 2 x 4, 2048 tokens): within 10 % of its measured step
    plain = [t for t in trials if t[4].endswith("micro-batch 2 × 4") and t[2]["method"] == "lora"]
    device, runs = evaluate(plain, [])
    assert runs == [] and len(device) == 1
    assert 0.9 < device[0][1] < 1.1
