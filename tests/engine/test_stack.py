"""The software stack (issue 13): what each kernel does to memory and speed, how the planner picks the stack and
explains what it did not pick, and that any pinned stack is a plan or one documented error."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from advisor.app.api import estimate, recommend
from conftest import hardware
from advisor.core.errors import AdvisorError, UsageError
from advisor.core.kernels import Attention, LossKernel, loss_kept
from probes.model import profile_model
from advisor.core.vocabulary import values

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


def test_liger_layers_keep_the_whole_logits_and_save_in_the_blocks() -> None:
    """``--loss-kernel liger-layers``: Liger's RMSNorm, SwiGLU and RoPE with the model's own loss (a loss that needs
    the logits): the blocks keep what Liger's keep, the head what the standard loss keeps; the step moves less than
    eager's, more than with the fused loss."""
    standard, layers, liger = (_est(loss_kernel=k) for k in ("standard", "liger-layers", "liger"))
    act = [e.memory.components.activations_bytes for e in (standard, layers, liger)]
    assert act[0] > act[1] > act[2]
    logits = 2 * 2048 * 128_256  # the standard loss's 10 B a logit (fitted: within 10 %), the fused loss's none
    assert act[1] - act[2] == pytest.approx(10 * logits, rel=0.10)
    times = [e.speed.step_time_s for e in (standard, layers, liger)]
    assert times[0] > times[1] > times[2]


def test_liger_layers_are_planned_when_asked_and_emitted_with_liger_s_config() -> None:
    from advisor.app.emit import training_args

    rec = recommend(LLAMA, gpu="h100-sxm", seq_len=4096)
    assert rec.plan.loss_kernel == "standard"  # never unasked: Liger's fused loss does the same with less
    layers = next(a for a in rec.settings["loss_kernel"].alternatives if a.value == "liger-layers")
    assert "--loss-kernel liger-layers" in layers.reason
    asked = recommend(LLAMA, gpu="h100-sxm", seq_len=4096, loss_kernel="liger-layers")
    assert asked.plan.loss_kernel == "liger-layers"
    args = training_args(asked)
    assert args["use_liger_kernel"] is True
    assert args["liger_kernel_config"] == {"fused_linear_cross_entropy": False, "cross_entropy": False}
    assert "liger_kernel_config" not in training_args(recommend(LLAMA, gpu="h100-sxm", loss_kernel="liger"))
    with pytest.raises(UsageError, match=r"--loss-kernel liger-layers: Liger does not patch 'gpt2'"):
        recommend("gpt2", gpu="a100-80gb", loss_kernel="liger-layers")


def test_compile_saves_activations_and_time() -> None:
    plain, compiled = _est(torch_compile=False), _est(torch_compile=True)
    assert compiled.memory.components.activations_bytes < plain.memory.components.activations_bytes
    assert compiled.speed.step_time_s < plain.speed.step_time_s


def test_compile_fuses_the_trainers_loss_to_chunked_cross_entropys_bytes() -> None:
    """The Trainer's loss runs in the model's forward, so a compiled model keeps the 16-bit logits only; LitGPT's
    loss runs outside the compiled model and keeps what it kept."""
    act = {
        (k, c): _est(loss_kernel=k, torch_compile=c).memory.components.activations_bytes
        for k in ("standard", "chunked")
        for c in (False, True)
    }
    assert act["standard", True] == act["chunked", True] < act["standard", False]
    assert (
        loss_kept("standard", True, "litgpt")
        == loss_kept("standard", False, "transformers")
        == LossKernel.STANDARD.spec
    )
    assert loss_kept("liger", True, "transformers") == LossKernel.LIGER.spec
    # Liger's layers leave the loss to the model: compiled with it, as the standard loss is
    layers = loss_kept("liger-layers", True, "transformers")
    assert layers.logit_bytes == LossKernel.CHUNKED.spec.logit_bytes and layers.fused_layers


@pytest.mark.slow
def test_a_compiled_loss_saves_the_16_bit_logits_only() -> None:
    """What :func:`advisor.core.kernels.loss_kept` says, on torch's own Inductor (CPU): transformers' ``ForCausalLMLoss``
    (fp32 upcast, shifted labels, summed cross-entropy) saves fp32 log-probabilities eagerly, 8 B a logit as autograd
    sees them, and the 16-bit logits with a max and log-sum-exp per row compiled, 2 B a logit."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    tokens, vocab = 256, 2048

    def loss(logits, labels):  # transformers.loss.loss_utils.ForCausalLMLoss, num_items_in_batch given
        labels = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
        return (
            F.cross_entropy(logits.float().view(-1, vocab), labels.view(-1), ignore_index=-100, reduction="sum")
            / tokens
        )

    def saved_per_logit(fn) -> float:
        logits = torch.randn(1, tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
        sizes: list[int] = []

        def pack(t):
            sizes.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(logits, torch.randint(0, vocab, (1, tokens))).backward()
        return sum(sizes) / (tokens * vocab)

    assert saved_per_logit(loss) == pytest.approx(8.0, abs=0.1)
    try:
        compiled = saved_per_logit(torch.compile(loss))
    except Exception as err:  # no C++ compiler for Inductor's CPU backend on this machine
        pytest.skip(f"Inductor cannot compile here: {type(err).__name__}")
    assert compiled == pytest.approx(LossKernel.CHUNKED.spec.logit_bytes, abs=0.1)


def test_fp8_speeds_up_the_linear_layers_only_on_ada_and_hopper() -> None:
    bf16, fp8 = _est(), _est(fp8=True)
    assert 1.1 < bf16.speed.step_time_s / fp8.speed.step_time_s < 1.5
    with pytest.raises(UsageError, match="fp8"):
        _est(gpu="a100-80gb", fp8=True)


def test_packing_counts_useful_tokens() -> None:
    padded = recommend(
        "gpt2", gpu="a100-80gb", seq_len=1024, mean_sample_len=256, attention="flash-attention-2", packing=False
    )
    packed = recommend("gpt2", gpu="a100-80gb", seq_len=1024, mean_sample_len=256, attention="flash-attention-2")
    assert packed.plan.packing and not padded.plan.packing
    # 4x the useful tokens per row, less attention; padded rows of 4 samples run ~2x their useful tokens (H_4 · 256)
    assert packed.speed.tokens_per_s > 2 * padded.speed.tokens_per_s
    with pytest.raises(UsageError):
        estimate("gpt2", gpu="a100-80gb", packing=True, attention="sdpa")  # SDPA would attend across samples


def test_estimate_prices_the_mean_sample_length_and_a_row_bounds_what_a_packed_query_attends() -> None:
    """``estimate`` reads ``mean_sample_len`` as ``recommend`` does. Unpacked samples are padded to their
    micro-batch's longest (:func:`advisor.engine.speed.padded_row_len`): one 256-token sample alone runs as a
    256-token row would, eight run shorter rows than 1024 tokens but carry less useful text than full ones.
    Packed rows attend within 256-token documents (less attention work); a packed document longer than a row is cut
    across rows, so a 4096-token mean prices the same step as full rows."""

    def est(micro: int = 8, seq_len: int = 1024, **kw):
        return estimate(
            "gpt2", gpu="a100-80gb", seq_len=seq_len, micro_batch_size=micro, attention="flash-attention-2", **kw
        )

    alone, short = est(1, packing=False, mean_sample_len=256), est(1, seq_len=256, packing=False)
    assert alone.speed.step_time_s == pytest.approx(short.speed.step_time_s, rel=1e-3)
    full, padded = est(packing=False), est(packing=False, mean_sample_len=256)
    assert padded.speed.step_time_s < full.speed.step_time_s and padded.speed.tokens_per_s < full.speed.tokens_per_s
    packed = est(packing=True, mean_sample_len=256)
    assert packed.speed.step_time_s < full.speed.step_time_s
    assert packed.speed.samples_per_s == pytest.approx(
        4 * full.speed.samples_per_s * full.speed.step_time_s / packed.speed.step_time_s
    )
    long = est(packing=True, mean_sample_len=4096)
    assert long.speed.step_time_s == full.speed.step_time_s
    assert long.speed.samples_per_s == pytest.approx(full.speed.samples_per_s / 4)  # a document spans 4 rows


def test_a_padded_row_is_the_expected_longest_sample_of_its_micro_batch() -> None:
    """Exponential lengths of mean μ cut at s: E[max of b] = μ·Σ U^k/k, U = 1 − e^(−s/μ); μ·H_b when s ≫ μ."""
    from advisor.engine.speed import padded_row_len

    assert padded_row_len(256, 10**7, 1) == pytest.approx(256)
    assert padded_row_len(256, 10**7, 4) == pytest.approx(256 * (1 + 1 / 2 + 1 / 3 + 1 / 4))
    u = 1 - math.exp(-2)
    assert padded_row_len(512, 1024, 2) == pytest.approx(512 * (u + u * u / 2))
    assert 1000 < padded_row_len(256, 1024, 1024) <= 1024  # towards the sequence length, never past it
    assert padded_row_len(2048, 1024, 8) == 1024  # samples that fill the row
    assert [padded_row_len(256, 2048, b) for b in (1, 2, 4, 8)] == sorted(
        padded_row_len(256, 2048, b) for b in (1, 2, 4, 8)
    )


def test_the_cuda_context_is_a_hardware_fact() -> None:
    small, large = _est(), _est(cuda_context_bytes=1343 * 2**20)
    assert large.memory.device_bytes - small.memory.device_bytes == (1343 - 500) * 2**20


def test_catalog_gpus_plan_without_optional_packages_and_price_them() -> None:
    rec = recommend(LLAMA, gpu="h100-sxm", seq_len=4096)
    assert (rec.plan.attention, rec.plan.loss_kernel, rec.plan.fp8) == ("sdpa", "standard", False)
    liger = next(a for a in rec.settings["loss_kernel"].alternatives if a.value == "liger")
    # priced: the memory either way (its best plan can take a larger micro-batch: "GiB more") and the speed
    assert "pip install liger-kernel" in liger.reason and "faster" in liger.reason
    assert re.search(r"\d GiB (less|more)", liger.reason), liger.reason


@pytest.mark.slow
def test_a_missing_package_that_would_make_the_plan_faster_is_a_gain_with_its_plan() -> None:
    """On a 24 GB L4 the Trainer's logits (16-bit once compiled, with their gradient) leave Llama-3.1-8B at 8192
    tokens to QLoRA; Liger's fused loss makes room for LoRA over bf16 weights: the gain carries that plan and how
    to install it (the card's row: tests/app/test_report.py)."""
    rec = recommend("meta-llama/Llama-3.1-8B", gpu="l4", seq_len=8192, global_batch_size=32)
    assert rec.plan.method == "qlora" and rec.plan.loss_kernel == "standard"
    (gain,) = [g for g in rec.gains if g.setting == "loss_kernel"]
    assert (gain.value, gain.package, gain.install) == ("liger", "liger-kernel", "pip install liger-kernel")
    assert gain.plan.method == "lora" and gain.plan.loss_kernel == "liger"
    assert gain.speedup == pytest.approx(gain.tokens_per_s / rec.speed.tokens_per_s) and gain.speedup > 1.1
    assert gain.device_bytes <= rec.memory.usable_bytes
    # installed where the plan trains: the planner takes it, and nothing is left to gain from it
    here = hardware({"gpu": "l4", "gpu_overrides": {}, "host": {"packages": {"liger_kernel": "0.6.2"}}})
    installed = recommend("meta-llama/Llama-3.1-8B", hardware=here, seq_len=8192, global_batch_size=32)
    assert installed.plan.loss_kernel == "liger" and installed.plan.method == "lora"
    assert not [g for g in installed.gains if g.setting == "loss_kernel"]


@pytest.mark.slow
def test_a_package_is_a_gain_only_when_it_alone_holds_back_a_faster_plan() -> None:
    # Liger does not patch GPT-2 (a hard forbid): nothing to install; FlashAttention-2 is as fast as SDPA's kernels
    assert recommend("gpt2", gpu="a100-80gb").gains == []
    # Llama-2-7B on an A100 80GB: FlashAttention-2 is as fast as SDPA's flash kernels, no gain; Liger's kernels move
    # less memory than eager's chain of ops (advisor.engine.traffic), a gain
    rec = recommend("meta-llama/Llama-2-7b-hf", gpu="a100-80gb", seq_len=2048)
    flash = next(a for a in rec.settings["attention"].alternatives if a.value == "flash-attention-2")
    assert "pip install flash-attn" in flash.reason and "as fast" in flash.reason
    assert [g.package for g in rec.gains] == ["liger-kernel"]
    # on Hopper both FlashAttention-3 and Liger would be faster: the fastest first
    hopper = recommend(LLAMA, gpu="h100-sxm", seq_len=4096)
    assert [g.package for g in hopper.gains] == ["flash-attn-3", "liger-kernel"]
    assert hopper.gains[0].speedup >= hopper.gains[1].speedup > 1


def _mpt(folder) -> str:
    """A small MPT config (MosaicML's model_type 'mpt'): transformers' MptForCausalLM declares no SDPA and no
    FlashAttention (transformers 5.24: ``_supports_sdpa = False``), so from_pretrained takes eager attention only."""
    config = {
        "architectures": ["MPTForCausalLM"],
        "model_type": "mpt",
        "d_model": 256,
        "n_heads": 4,
        "n_layers": 2,
        "expansion_ratio": 4,
        "max_seq_len": 512,
        "vocab_size": 1024,
        "no_bias": True,
        "attn_config": {"alibi": True},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_a_model_class_without_sdpa_plans_eager_attention(tmp_path) -> None:
    mpt = _mpt(tmp_path)
    assert profile_model(mpt).attention_kernels == ["eager"]
    rec = recommend(mpt, gpu="a100-80gb", seq_len=512)
    assert rec.plan.attention == "eager" and not rec.gains
    sdpa = next(a for a in rec.settings["attention"].alternatives if a.value == "sdpa")
    assert "transformers' mpt code has no sdpa path" in sdpa.reason
    assert estimate(mpt, gpu="a100-80gb", seq_len=512).plan.attention == "eager"  # estimate's default follows
    with pytest.raises(UsageError, match="transformers' mpt code has no sdpa path"):
        estimate(mpt, gpu="a100-80gb", seq_len=512, attention="sdpa")
    with pytest.raises(UsageError, match=r"no plan can run with --attention flash-attention-2 here: transformers' mpt"):
        recommend(mpt, gpu="a100-80gb", seq_len=512, attention="flash-attention-2")
    # the closed-form families: T5 runs SDPA but has no FlashAttention path
    assert profile_model("t5-small").attention_kernels == ["sdpa", "eager"]
    with pytest.raises(UsageError, match="transformers' t5 code has no flash-attention-2 path"):
        estimate("t5-small", gpu="a100-80gb", attention="flash-attention-2")


def test_a_pinned_kernel_that_cannot_run_is_one_line() -> None:
    with pytest.raises(UsageError, match=r"--attention flash-attention-2: .*compute capability"):
        recommend("gpt2", gpu="v100-16gb", attention="flash-attention-2")
    with pytest.raises(UsageError, match=r"--loss-kernel liger: Liger does not patch 'gpt2'"):
        recommend("gpt2", gpu="a100-80gb", loss_kernel="liger")
    # no layout can run it (SDPA is the only kernel a V100 has): one line, not "nothing fits"
    with pytest.raises(UsageError, match=r"no plan can run with --packing here: padding-free packing needs"):
        recommend("gpt2", gpu="v100-16gb", packing=True)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpu=st.sampled_from(["v100-16gb", "a100-80gb", "h100-sxm", "rtx-4090"]),
    model=st.sampled_from(["gpt2", LLAMA]),
    attention=st.none() | st.sampled_from(values(Attention)),
    loss_kernel=st.none() | st.sampled_from(values(LossKernel)),
    compile_=st.none() | st.booleans(),
    packing=st.none() | st.booleans(),
    fp8=st.none() | st.booleans(),
    mean=st.none() | st.integers(1, 2048),
)
def test_any_pinned_stack_is_a_plan_that_keeps_it_or_one_documented_error(
    gpu, model, attention, loss_kernel, compile_, packing, fp8, mean
) -> None:
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
