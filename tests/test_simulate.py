"""The simulated step (fake tensors): exact accounting on a tiny gpt2, and the CUDA modelling."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from advisor.app.api import estimate  # noqa: E402
from advisor.measure.simulate import simulate  # noqa: E402
from probes.errors import UsageError  # noqa: E402
from probes.model import profile_model  # noqa: E402
from rules import Plan  # noqa: E402

TINY = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 128, "n_head": 4,
        "n_positions": 256, "vocab_size": 1000, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return profile_model(str(path))


def _plan(**kw) -> Plan:
    base = dict(device="cuda", precision="fp32", tf32=False, optimizer="adamw", gradient_checkpointing=False,
                micro_batch_size=4, gradient_accumulation_steps=1, parallelism="none", num_gpus=1)
    base.update(kw)
    return Plan(**base)


def test_optimizer_state_and_weights_are_counted(tiny) -> None:
    result = simulate(tiny, _plan(), 128)
    P = tiny.num_parameters
    assert result.phase_peaks["optimizer"] >= (4 + 4 + 8) * P  # weights, grads and both AdamW states
    assert result.peak_bytes == max(result.phase_peaks.values())


def test_flash_attention_on_cuda_keeps_no_score_matrix(tiny) -> None:
    def growth(device: str) -> int:  # forward peak from s=128 to s=256
        peaks = [simulate(tiny, _plan(device=device), s).phase_peaks["forward"] for s in (128, 256)]
        return peaks[1] - peaks[0]

    scores = 2 * 4 * 4 * (256**2 - 128**2) * 4  # layers x batch x heads x (s^2 growth) x fp32 softmax output
    assert growth("cpu") - growth("cuda") >= 0.5 * scores  # eager keeps s x s probabilities; flash does not


def test_checkpointing_and_bf16_lower_the_forward_peak(tiny) -> None:
    base = simulate(tiny, _plan(micro_batch_size=8), 256).phase_peaks["forward"]
    assert simulate(tiny, _plan(micro_batch_size=8, gradient_checkpointing=True), 256).phase_peaks["forward"] < base
    assert simulate(tiny, _plan(micro_batch_size=8, precision="bf16"), 256).phase_peaks["forward"] < base


def test_estimate_with_simulate_reports_the_analytic_error(tiny) -> None:
    est = estimate(tiny, gpu="a100-80gb", seq_len=128, micro_batch_size=4, simulate=True)
    sim = est.simulated
    assert sim is not None and sim.peak_bytes > 0 and sim.device_bytes > sim.peak_bytes
    assert sim.analytic_error == pytest.approx(est.memory.peak_bytes / sim.peak_bytes - 1)


def test_eight_bit_adam_cannot_be_simulated(tiny) -> None:
    with pytest.raises(UsageError, match="bitsandbytes"):
        simulate(tiny, _plan(optimizer="adamw-8bit"), 64)


def _lora_params(tiny, rank: int) -> int:
    """The adapters PEFT makes on the tiny GPT-2: advisor's count less its documented approximation (the fused
    c_attn is one r·(h + 3h) adapter, counted as three r·2h)."""
    from probes.adapters import adapter_parameters

    return adapter_parameters(tiny, rank, "all-linear") - 2 * rank * tiny.hidden_size * tiny.num_layers


def test_lora_trains_only_the_adapters(tiny) -> None:
    """Each adapter parameter holds 16 B at the optimizer step (fp32 weight, gradient, AdamW's two moments), the
    frozen base 4 B (no gradient, no state)."""
    pytest.importorskip("peft")
    peaks = {r: simulate(tiny, _plan(method="lora", lora_rank=r), 128).phase_peaks["optimizer"] for r in (16, 32)}
    assert peaks[32] - peaks[16] == 16 * (_lora_params(tiny, 32) - _lora_params(tiny, 16))
    full = simulate(tiny, _plan(), 128).phase_peaks["optimizer"]
    P = tiny.num_parameters
    assert peaks[16] == pytest.approx(4 * P + 16 * _lora_params(tiny, 16), rel=0.01)
    assert full == pytest.approx(16 * P, rel=0.01)


def test_pure_bf16_weights_hold_no_fp32_copy(tiny) -> None:
    """bf16 weights: weights, gradients and AdamW's moments in 2 bytes each (8 B/param instead of 16)."""
    fp32 = simulate(tiny, _plan(precision="bf16"), 128).phase_peaks["optimizer"]
    bf16 = simulate(tiny, _plan(precision="bf16", weights_dtype="bf16"), 128).phase_peaks["optimizer"]
    P = tiny.num_parameters
    assert fp32 - bf16 == pytest.approx(8 * P, rel=0.01)


def test_estimate_simulates_lora_and_bf16_plans_within_10_percent(tiny) -> None:
    pytest.importorskip("peft")
    for kw in (dict(method="lora"), dict(method="lora", lora_targets="attention", gradient_checkpointing=True),
               dict(weights_dtype="bf16")):
        est = estimate(tiny, gpu="a100-80gb", seq_len=128, micro_batch_size=4, simulate=True, **kw)
        assert est.plan.weights_dtype == "bf16" and est.simulated is not None
        assert abs(est.simulated.analytic_error) < 0.10, (kw, est.simulated)


def test_qlora_and_bitsandbytes_optimizers_are_refused_in_one_line(tiny) -> None:
    with pytest.raises(UsageError, match="4-bit base analytically") as err:
        simulate(tiny, _plan(method="qlora", precision="bf16", weights_dtype="bf16"), 64)
    assert "\n" not in str(err.value) and "--method lora" in str(err.value)
    for optimizer in ("paged-adamw", "paged-adamw-8bit"):
        with pytest.raises(UsageError, match="bitsandbytes"):
            simulate(tiny, _plan(optimizer=optimizer), 64)


def test_cli_estimate_simulate_qlora_exits_2_with_one_line(tiny) -> None:
    from test_cli import advisor

    res = advisor("estimate", "--model", tiny.config_path, "--gpu", "a100-80gb", "--method", "qlora", "--seq-len", "64",
                  "--simulate")
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and "cannot run qlora" in res.stderr


def test_optimizer_step_in_backward_holds_no_full_set_of_gradients(tiny) -> None:
    """Post-accumulate-grad hooks step each parameter and free its gradient: the step's peak loses the gradients
    (4 B/param in fp32) and there is no optimizer phase after backward; the estimate follows within 10 %."""
    plan = _plan(micro_batch_size=1)  # 8 tokens: the gradients, not the activations, set the peak
    after = simulate(tiny, plan, 8)
    fused = simulate(tiny, plan.model_copy(update={"optimizer_in_backward": True}), 8)
    assert "optimizer" not in fused.phase_peaks
    assert fused.peak_bytes < after.peak_bytes - 2 * tiny.num_parameters
    est = estimate(tiny, gpu="a100-80gb", seq_len=8, micro_batch_size=1, optimizer_in_backward=True, simulate=True)
    assert abs(est.simulated.analytic_error) < 0.10, est.simulated
