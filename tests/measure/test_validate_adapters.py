"""Trials of LoRA, QLoRA and pure-bf16 plans on this machine (the CPU here): LoRA and bf16 weights run and are
measured; QLoRA runs on the CPU too (bitsandbytes' CPU backend) and is measured."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)

pytest.importorskip("torch")
pytest.importorskip("transformers")

from advisor.app import api  # noqa: E402
from advisor.measure.validation import baseline_plan, method_unavailable, without_missing_packages  # noqa: E402
from probes.hardware import HardwareProfile, read_host  # noqa: E402
from advisor.core.vocabulary import Method, Optimizer, WeightsDtype  # noqa: E402

from helpers import TINY_GPT2 as TINY, cpu_plan as _plan  # noqa: E402

CPU = HardwareProfile(source="none", host=read_host())
GPT2_PARAMETERS = 124_439_808


@pytest.fixture
def tiny(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_gpt2_lora_trial_trains_the_adapters_only() -> None:
    """gpt2 from the shipped catalog, LoRA on the CPU: the frozen base holds its weights' width per parameter (4 B in
    fp32; 2 B where the plan loads bf16 weights, as on a CPU with AMX), not full fine-tuning's 16 (weights, gradients,
    AdamW's moments), and the analytic model is within 25 % of the counted peak."""
    pytest.importorskip("peft")
    report = api.validate("gpt2", seq_len=32, global_batch_size=2, steps=1, method=Method.LORA.value, hardware=CPU)
    assert report.verdict == "confirmed", report.trials[-1].message
    (trial,) = report.trials
    assert trial.plan.method == Method.LORA and trial.measured.losses_finite
    peak = trial.measured.peak_bytes
    width = WeightsDtype.of(trial.plan.weights_dtype).bytes  # the plan's choice follows this CPU's bf16 support
    assert width * GPT2_PARAMETERS < peak < 2 * width * GPT2_PARAMETERS
    assert abs(trial.error.peak_bytes) < 0.25, trial.error


def test_lora_trial_of_given_rank_and_targets(tiny) -> None:
    pytest.importorskip("peft")
    peaks = {}
    for rank in (4, 64):
        report = api.validate(
            tiny,
            seq_len=32,
            global_batch_size=4,
            steps=1,
            method=Method.LORA.value,
            lora_rank=rank,
            lora_targets="attention",
            hardware=CPU,
        )
        (trial,) = report.trials
        assert trial.status == "ok" and (trial.plan.lora_rank, trial.plan.lora_targets) == (rank, "attention")
        peaks[rank] = trial.measured.peak_bytes
    # GPT-2's attention adapters: c_attn r·(h + 3h) and c_proj r·2h per layer; each holds its fp32 weight and
    # AdamW's two fp32 moments (12 B) through the whole counted step, its gradient for part of it
    h, layers = TINY["n_embd"], TINY["n_layer"]
    assert peaks[64] - peaks[4] >= 12 * 60 * 6 * h * layers


def test_pure_bf16_weights_trial(tiny) -> None:
    report = api.validate(
        tiny, seq_len=32, global_batch_size=4, steps=1, precision="bf16", weights_dtype="bf16", hardware=CPU
    )
    (trial,) = report.trials
    assert trial.status == "ok" and trial.plan.weights_dtype == "bf16"
    assert abs(trial.error.peak_bytes) < 0.25, trial.error
    fp32 = api.validate(
        tiny, seq_len=32, global_batch_size=4, steps=1, precision="bf16", weights_dtype="fp32", hardware=CPU
    ).trials[0]
    assert trial.measured.peak_bytes < fp32.measured.peak_bytes  # no fp32 weights, gradients or moments


def test_qlora_trial_runs_on_the_cpu(tiny) -> None:
    """A tiny QLoRA trial on the CPU (bitsandbytes' CPU backend): the 4-bit base quantized, the adapters trained,
    finite losses; through the command too, exit 0."""
    pytest.importorskip("peft")
    pytest.importorskip("bitsandbytes")
    report = api.validate(tiny, seq_len=32, global_batch_size=4, steps=1, method=Method.QLORA.value, hardware=CPU)
    (trial,) = report.trials
    assert trial.status == "ok", trial.message
    assert trial.plan.method == Method.QLORA and trial.plan.device == "cpu" and trial.measured.losses_finite
    from cli_runner import advisor

    res = advisor(
        "validate", "--model", tiny, "--seq-len", "32", "--global-batch-size", "4", "--steps", "1", "--method", "qlora"
    )
    assert res.returncode == 0, res.stderr
    assert "Verdict:" in res.stdout and "qlora" in res.stdout


def test_method_unavailable_names_what_is_missing(monkeypatch) -> None:
    assert method_unavailable(Method.FULL.value) is None
    real = importlib.util.find_spec
    if real("peft") is not None and real("bitsandbytes") is not None:
        assert method_unavailable(Method.QLORA.value) is None  # whatever the device: the CPU runs it too
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    assert method_unavailable(Method.LORA.value) == "lora trials need the peft package: pip install peft"
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    assert "pip install bitsandbytes" in method_unavailable(Method.QLORA.value)


def test_baseline_of_an_adapter_plan_is_full_fp32_fine_tuning() -> None:
    plan = _plan(method="lora", precision="bf16", weights_dtype="bf16", optimizer="adamw")
    base = baseline_plan(plan)
    assert (base.method, base.weights_dtype, base.precision, base.optimizer) == ("full", "fp32", "fp32", "adamw")
    assert base.global_batch_size == plan.global_batch_size


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed here")
def test_paged_optimizer_without_bitsandbytes_validates_the_nearest_plan() -> None:
    from conftest import facts

    f = facts("cpu", model="gpt2", seq_len=32, global_batch_size=4)
    plan = _plan(optimizer=Optimizer.PAGED_ADAMW_8BIT.value)
    chosen, note = without_missing_packages(f, plan)
    assert chosen.optimizer in (Optimizer.ADAMW, Optimizer.ADAFACTOR)
    assert "paged 8-bit AdamW needs bitsandbytes" in note and "pip install bitsandbytes" in note
