"""The simulated step (fake tensors): exact accounting on a tiny gpt2, and the CUDA modelling."""

from __future__ import annotations

import json

import pytest
from conftest import cuda_plan  # noqa: E402

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)

pytest.importorskip("torch")
pytest.importorskip("transformers")

from advisor.app.api import estimate  # noqa: E402
from advisor.measure.simulate import simulate  # noqa: E402
from advisor.core.errors import UsageError  # noqa: E402
from probes.model import profile_model  # noqa: E402
from rules import Plan  # noqa: E402

TINY = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_layer": 2,
    "n_embd": 128,
    "n_head": 4,
    "n_positions": 256,
    "vocab_size": 1000,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return profile_model(str(path))


def _plan(**kw) -> Plan:
    return cuda_plan(**{"precision": "fp32", "tf32": False, "micro_batch_size": 4, **kw})


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
    for kw in (dict(method="lora"), dict(weights_dtype="bf16")):
        est = estimate(tiny, gpu="a100-80gb", seq_len=128, micro_batch_size=4, simulate=True, **kw)
        assert est.plan.weights_dtype == "bf16" and est.simulated is not None
        assert abs(est.simulated.analytic_error) < 0.10, (kw, est.simulated)


def test_a_checkpointed_lora_step_whose_peak_is_a_block_not_the_head_within_10_percent(tiny) -> None:
    """This 2-layer gpt2 (h = 128, a 1000-token vocabulary) peaks in the backward of its last recomputed block, not
    beside the LM head's logits: the calibrated ``ckpt_block_*`` terms price that moment (-22.8 % without them)."""
    pytest.importorskip("peft")
    est = estimate(
        tiny,
        gpu="a100-80gb",
        seq_len=128,
        micro_batch_size=4,
        simulate=True,
        method="lora",
        lora_targets="attention",
        gradient_checkpointing=True,
    )
    assert est.simulated.peak_phase == "backward"
    assert abs(est.simulated.analytic_error) < 0.10, est.simulated


def test_a_compiled_plan_is_not_simulated_eagerly(tiny) -> None:
    """Fake tensors run the eager model: a compiled plan (whose loss and pointwise ops Inductor fuses) is refused in
    one line rather than compared with an eager step."""
    with pytest.raises(UsageError, match="--no-torch-compile"):
        estimate(tiny, gpu="a100-80gb", seq_len=128, micro_batch_size=4, torch_compile=True, simulate=True)


TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 256,
}


@pytest.fixture
def tiny_llama(tmp_path):
    path = tmp_path / "llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_LLAMA))
    return profile_model(str(path))


def _bf16(method: str, **kw) -> Plan:
    return _plan(
        **{
            "method": method,
            "precision": "bf16",
            "weights_dtype": "bf16",
            "optimizer": "sgd",
            "lora_targets": "all-linear",
            **kw,
        }
    )


def test_qlora_runs_bitsandbytes_4bit_layers_on_fake_tensors(tiny_llama) -> None:
    """The blocks' linear weights are bitsandbytes' packed NF4 (n/2 bytes) with double-quantized absmax (n/64 bytes,
    an fp32 absmax per 256 of those, the 8-bit code book, the NF4 code and the offset), the LM head and embeddings
    stay 16-bit: the build holds that instead of LoRA's 2 bytes per block weight."""
    pytest.importorskip("bitsandbytes")
    lora, qlora = (simulate(tiny_llama, _bf16(m), 64) for m in ("lora", "qlora"))
    sizes = tiny_llama.num_layers * ([128 * 128] * 4 + [128 * 352] * 3)  # q, k, v, o, gate, up, down
    packed = sum(n // 2 + n // 64 + 4 * -(-n // (64 * 256)) + 4 * 256 + 4 * 16 + 4 for n in sizes)
    assert lora.build_bytes - qlora.build_bytes == 2 * sum(sizes) - packed
    assert qlora.peak_bytes < lora.peak_bytes


def test_bitsandbytes_before_0_43_2_keeps_each_4bit_layers_input(tiny_llama) -> None:
    """bitsandbytes < 0.43.2 kept ``(A, B)`` for backward (PR 1270 keeps ``(None, B)``): more held at the end of the
    forward pass where no adapter keeps the same input (attention-only adapters: the MLP's), and under checkpointing
    whatever the adapters, since the input is kept outside ``save_for_backward``, which checkpointing cannot drop."""
    pytest.importorskip("bitsandbytes")
    for targets, ckpt in (("attention", False), ("all-linear", True)):
        kw = dict(lora_targets=targets, gradient_checkpointing=ckpt)
        now = simulate(tiny_llama, _bf16("qlora", **kw), 128).phase_peaks["forward"]
        legacy = simulate(tiny_llama, _bf16("qlora", legacy_bitsandbytes=True, **kw), 128).phase_peaks["forward"]
        # at least the MLP's down-projection input (4 x 128 tokens x 352, bf16) in each of the 2 layers
        assert legacy - now >= 2 * 4 * 128 * 352 * 2, (targets, ckpt)


def test_qlora_without_bitsandbytes_and_its_optimizers_are_refused_in_one_line(tiny, monkeypatch) -> None:
    import advisor.measure.simulate as sim

    monkeypatch.setattr(sim, "missing_reason", lambda: "QLoRA's 4-bit base needs the bitsandbytes package")
    with pytest.raises(UsageError, match="bitsandbytes package") as err:
        simulate(tiny, _plan(method="qlora", precision="bf16", weights_dtype="bf16"), 64)
    assert "\n" not in str(err.value) and "cannot run qlora" in str(err.value)
    for optimizer in ("paged-adamw", "paged-adamw-8bit"):
        with pytest.raises(UsageError, match="bitsandbytes"):
            simulate(tiny, _plan(optimizer=optimizer), 64)
    for framework, named in (("litgpt", "LitGPT's own model code"), ("megatron", "Megatron-style fused layers")):
        with pytest.raises(UsageError, match=f"not {named}") as err:  # the analytic estimate only
            simulate(tiny, _plan(framework=framework), 64)
        assert "\n" not in str(err.value) and ("litgpt_simulated.py" in str(err.value)) == (framework == "litgpt")


def test_cli_estimate_simulates_qlora(tiny_llama) -> None:
    pytest.importorskip("bitsandbytes")
    from cli_runner import advisor

    res = advisor(
        "estimate",
        "--model",
        tiny_llama.config_path,
        "--gpu",
        "a100-80gb",
        "--method",
        "qlora",
        "--seq-len",
        "64",
        "--simulate",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["plan"]["method"] == "qlora" and out["simulated"]["peak_bytes"] > 0


def test_estimate_prices_the_installed_bitsandbytes(tiny_llama) -> None:
    """On this machine, QLoRA is priced as the installed bitsandbytes runs it; for catalog GPUs, as 0.43.2 and later."""
    from conftest import hardware

    old = hardware({"gpu": "a100-80gb", "gpu_overrides": {}, "host": {"packages": {"bitsandbytes": "0.42.0"}}})
    new = hardware({"gpu": "a100-80gb", "gpu_overrides": {}, "host": {"packages": {"bitsandbytes": "0.50.2"}}})
    kw = dict(method="qlora", lora_targets="attention", seq_len=128, micro_batch_size=4)
    legacy, current = estimate(tiny_llama, hardware=old, **kw), estimate(tiny_llama, hardware=new, **kw)
    assert legacy.plan.legacy_bitsandbytes and not current.plan.legacy_bitsandbytes
    assert legacy.memory.components.activations_bytes > current.memory.components.activations_bytes
    assert not estimate(tiny_llama, gpu="a100-80gb", **kw).plan.legacy_bitsandbytes
    said = estimate(tiny_llama, hardware=new, legacy_bitsandbytes=True, **kw)
    assert said.memory.components.activations_bytes == legacy.memory.components.activations_bytes


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
