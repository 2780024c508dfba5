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
