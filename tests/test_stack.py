"""The software stack (issue 13): what each kernel does to memory and speed, how the planner picks the stack and
explains what it did not pick, and that any pinned stack is a plan or one documented error."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from advisor.app.api import estimate, recommend
from probes.errors import AdvisorError, UsageError
from probes.kernels import Attention, LossKernel
from probes.vocabulary import values

LLAMA = "meta-llama/Llama-3.1-8B"


def _est(model: str = LLAMA, **kw):
    base = dict(gpu="h100-sxm", method="lora", micro_batch_size=2, seq_len=2048)
    return estimate(model, **{**base, **kw})


def test_eager_attention_keeps_the_scores_and_costs_time() -> None:
    sdpa, eager = _est(attention="sdpa"), _est(attention="eager")
    assert eager.memory.components.activations_bytes > sdpa.memory.components.activations_bytes
    assert eager.speed.step_time_s > sdpa.speed.step_time_s


def test_flash_attention_3_is_faster_than_sdpa_on_hopper_at_the_same_memory() -> None:
    sdpa, fa3 = _est(attention="sdpa"), _est(attention="flash-attention-3")
    assert fa3.memory.peak_bytes == sdpa.memory.peak_bytes
    assert fa3.speed.step_time_s < sdpa.speed.step_time_s


def test_liger_drops_the_logits_and_chunked_keeps_16_bit_ones() -> None:
    standard, chunked, liger = (_est(loss_kernel=k) for k in ("standard", "chunked", "liger"))
    act = [e.memory.components.activations_bytes for e in (standard, chunked, liger)]
    assert act[0] > act[1] > act[2]
    # Llama 3's 128k vocabulary at 2 x 2048 tokens: the standard loss's 10 B per logit, chunked's 2 (the LoRA column's
    # fitted logit coefficient is 9.2 B, its simulated vocabularies being close together: within 10 %)
    logits = 2 * 2048 * 128_256
    assert act[0] - act[1] == pytest.approx(8 * logits, rel=0.10)


def test_compile_saves_activations_and_time() -> None:
    plain, compiled = _est(torch_compile=False), _est(torch_compile=True)
    assert compiled.memory.components.activations_bytes < plain.memory.components.activations_bytes
    assert compiled.speed.step_time_s < plain.speed.step_time_s


def test_fp8_speeds_up_the_linear_layers_only_on_ada_and_hopper() -> None:
    bf16, fp8 = _est(), _est(fp8=True)
    assert 1.1 < bf16.speed.step_time_s / fp8.speed.step_time_s < 1.5
    with pytest.raises(UsageError, match="fp8"):
        _est(gpu="a100-80gb", fp8=True)


def test_packing_counts_useful_tokens() -> None:
    padded = recommend("gpt2", gpu="a100-80gb", seq_len=1024, mean_sample_len=256, attention="flash-attention-2",
                       packing=False)
    packed = recommend("gpt2", gpu="a100-80gb", seq_len=1024, mean_sample_len=256, attention="flash-attention-2")
    assert packed.plan.packing and not padded.plan.packing
    assert packed.speed.tokens_per_s > 3 * padded.speed.tokens_per_s  # 4x the useful tokens per row, less attention
    with pytest.raises(UsageError):
        estimate("gpt2", gpu="a100-80gb", packing=True, attention="sdpa")  # SDPA would attend across samples


def test_the_cuda_context_is_a_hardware_fact() -> None:
    small, large = _est(), _est(cuda_context_bytes=1343 * 2**20)
    assert large.memory.device_bytes - small.memory.device_bytes == (1343 - 500) * 2**20


def test_catalog_gpus_plan_without_optional_packages_and_price_them() -> None:
    rec = recommend(LLAMA, gpu="h100-sxm", seq_len=4096)
    assert (rec.plan.attention, rec.plan.loss_kernel, rec.plan.fp8) == ("sdpa", "standard", False)
    liger = next(a for a in rec.settings["loss_kernel"].alternatives if a.value == "liger")
    assert "pip install liger-kernel" in liger.reason and "GiB less" in liger.reason and "faster" in liger.reason


def test_a_pinned_kernel_that_cannot_run_is_one_line() -> None:
    with pytest.raises(UsageError, match=r"--attention flash-attention-2: .*compute capability"):
        recommend("gpt2", gpu="v100-16gb", attention="flash-attention-2")
    with pytest.raises(UsageError, match=r"--loss-kernel liger: Liger does not patch 'gpt2'"):
        recommend("gpt2", gpu="a100-80gb", loss_kernel="liger")
    # no layout can run it (SDPA is the only kernel a V100 has): one line, not "nothing fits"
    with pytest.raises(UsageError, match=r"no plan can run with --packing here: padding-free packing needs"):
        recommend("gpt2", gpu="v100-16gb", packing=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu=st.sampled_from(["v100-16gb", "a100-80gb", "h100-sxm", "rtx-4090"]),
       model=st.sampled_from(["gpt2", LLAMA]),
       attention=st.none() | st.sampled_from(values(Attention)),
       loss_kernel=st.none() | st.sampled_from(values(LossKernel)),
       compile_=st.none() | st.booleans(), packing=st.none() | st.booleans(), fp8=st.none() | st.booleans(),
       mean=st.none() | st.integers(1, 2048))
def test_any_pinned_stack_is_a_plan_that_keeps_it_or_one_documented_error(gpu, model, attention, loss_kernel,
                                                                          compile_, packing, fp8, mean) -> None:
    pins = dict(attention=attention, loss_kernel=loss_kernel, torch_compile=compile_, packing=packing, fp8=fp8)
    try:
        rec = recommend(model, gpu=gpu, seq_len=1024, mean_sample_len=mean, **pins)
    except AdvisorError as err:  # a usage line, or nothing fits: never another exception
        assert str(err) and "\n" not in str(err).split(": would fit")[0]
        return
    for name, value in pins.items():
        if value is not None:
            assert getattr(rec.plan, name) == value
    assert rec.memory.fits and rec.speed.tokens_per_s > 0
