"""Issue 12: fine-tuning methods (full / LoRA / QLoRA), pure bf16 weights, paged optimizers and offload on one GPU,
as a user meets them (``recommend`` / ``estimate`` through the API and the CLI), and the counts they rest on."""

from __future__ import annotations

import json

import pytest

from cli_runner import ROOT, advisor

from advisor.app.api import estimate, recommend
from advisor.engine.states import host_bytes
from probes.adapters import (
    NF4_BYTES_PER_PARAM,
    NF4_PLAIN_BYTES_PER_PARAM,
    adapter_full_rank,
    adapter_parameters,
    quantized_parameters,
)
from advisor.core.errors import UsageError
from probes.model import profile_model
from rules import Plan

LLAMA2 = "meta-llama/Llama-2-7b-hf"


def test_lora_adapter_count_is_pefts() -> None:
    """PEFT prints 'trainable params: 39,976,960' for Llama-2-7B with r=16 on all seven linear projections."""
    model = profile_model(LLAMA2)
    assert adapter_parameters(model, 16, "all-linear") == 39_976_960
    assert adapter_parameters(model, 16, "attention") == 4 * 16 * (4096 + 4096) * 32


def test_a_rank_above_the_layers_full_rank_is_warned() -> None:
    """gpt2's layers are at most rank 768 (h = 768): r = 1000 adds parameters, not capacity, and the plan says so;
    r = 768 is still a full-rank update and gets no warning."""
    assert adapter_full_rank(profile_model("gpt2"), "all-linear") == 768
    warned = recommend("gpt2", gpu="a100-80gb", method="lora", lora_rank=1000)
    assert any("rank 1000 is above 768" in w.message for w in warned.warnings)
    assert not any(
        "full rank" in w.message for w in recommend("gpt2", gpu="a100-80gb", method="lora", lora_rank=768).warnings
    )


@pytest.mark.parametrize(
    "call, kwargs",
    [
        (recommend, {"method": "full", "lora_rank": 8}),
        (recommend, {"from_scratch": True, "lora_targets": "q-v"}),
        (estimate, {"lora_rank": 8}),
        (estimate, {"method": "full", "lora_targets": "q-v"}),
    ],
)
def test_adapter_flags_for_a_plan_without_adapters_are_refused(call, kwargs) -> None:
    """--lora-rank / --lora-targets with full fine-tuning (estimate's default) or pre-training had no effect and
    said nothing; with the planner's choice (recommend's auto) they shape the adapters if it picks them."""
    with pytest.raises(UsageError, match="shapes LoRA / QLoRA adapters"):
        call("gpt2", gpu="a100-80gb", **kwargs)
    assert recommend("gpt2", gpu="a100-80gb", lora_rank=8).plan.method == "full"


def test_nf4_with_double_quantization_is_4127_bits() -> None:
    """QLoRA sec. 3: 4 bits + 8/64 + 32/(64*256) bits of constants per parameter."""
    assert NF4_BYTES_PER_PARAM * 8 == pytest.approx(4.127, abs=1e-3)
    model = profile_model(LLAMA2)
    assert (
        quantized_parameters(model) == model.num_parameters - 2 * 32000 * 4096 - 65 * 4096
    )  # all but embeddings, head, norms


def test_plain_nf4_keeps_an_fp32_constant_per_64_weights() -> None:
    """Without double quantization (``--no-double-quant``: transformers' default, LitGPT's bnb.nf4) 4.5 bits a weight;
    LitGPT's resource table measured 0.30 GB (Llama 2 7B) and 0.59 GB (13B) between bnb.nf4 and bnb.nf4-dq, which
    0.373 bits over the blocks' weights give (0.30 and 0.59 GB)."""

    assert NF4_PLAIN_BYTES_PER_PARAM * 8 == 4.5
    for model_id, published in ((LLAMA2, 14.14e9 - 13.84e9), ("meta-llama/Llama-2-13b-hf", 23.14e9 - 22.55e9)):
        kw = dict(model=model_id, gpu="a100-40gb", method="qlora", weights_dtype="bf16", seq_len=512)
        plain, dq = (estimate(**kw, double_quant=dq).memory.components.weights_bytes for dq in (False, True))
        assert plain - dq == pytest.approx(published, abs=0.02e9)


def test_zero_offload_host_memory_follows_deepspeeds_estimator() -> None:
    """estimate_zero2/3_model_states_mem_needs on one GPU: 16 (optimizer offload) or 18 (and parameters) B/param
    times additional_buffer_factor 1.5."""
    model = profile_model(LLAMA2)
    base = dict(
        device="cuda",
        precision="bf16",
        tf32=True,
        optimizer="adamw",
        gradient_checkpointing=True,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        num_gpus=1,
    )
    opt = Plan(**base, parallelism="zero-2", offload="optimizer")
    everything = Plan(**base, parallelism="zero-3", offload="optimizer+parameters")
    assert host_bytes(model, opt) == pytest.approx(16 * 1.5 * model.num_parameters, rel=1e-6)
    assert host_bytes(model, everything) == pytest.approx(18 * 1.5 * model.num_parameters, rel=1e-6)


def test_llama2_7b_on_a_24gb_card_gets_adapters_and_says_why_full_lost() -> None:
    rec = recommend(LLAMA2, gpu="rtx-4090")
    assert rec.plan.method in ("lora", "qlora") and rec.memory.fits
    full = next(a for a in rec.settings["method"].alternatives if a.value == "full")
    assert "offload" in full.reason and "tokens/s" in full.reason and "without offload it needs" in full.reason


def test_full_fine_tuning_on_a_24gb_card_offloads() -> None:
    rec = recommend(LLAMA2, gpu="rtx-4090", method="full")
    assert (
        rec.plan.method == "full"
        and rec.plan.offload != "none"
        and rec.plan.parallelism in ("zero-3", "zero-2", "fsdp-full-shard")
    )
    lora = next(a for a in rec.settings["method"].alternatives if a.value == "lora")
    assert "asked for" in lora.reason and "GiB per GPU" in lora.reason
    assert any("--host-memory" in w.message for w in rec.warnings)


def test_host_memory_too_small_for_ram_offload_goes_to_nvme() -> None:
    rec = recommend(LLAMA2, gpu="rtx-4090", method="full", host_memory_bytes=64 * 10**9)
    assert rec.plan.offload == "nvme" and rec.memory.host_bytes < 64 * 10**9


def test_eight_a100s_still_train_every_weight() -> None:
    assert recommend(LLAMA2, gpu="a100-80gb:8").plan.method == "full"


def test_one_a100_weighs_bf16_weights_against_lora_with_figures() -> None:
    """Llama-2-7B on one A100 80GB: full fine-tuning fits only with bf16 weights (a quality-risk fallback), and LoRA
    trains faster, so --method auto takes LoRA and says what full fine-tuning would need and at what speed
    (method.full-unless-quality-risk); --method full keeps full fine-tuning with LoRA's figures beside it."""
    rec = recommend(LLAMA2, gpu="a100-80gb")
    assert rec.plan.method == "lora"
    assert "full fine-tuning would need weights_dtype=bf16 at 0." in rec.settings["method"].rationale
    full = next(a for a in rec.settings["method"].alternatives if a.value == "full")
    assert "[method.full-unless-quality-risk]" in full.reason
    pinned = recommend(LLAMA2, gpu="a100-80gb", method="full")
    assert pinned.plan.method == "full" and pinned.plan.weights_dtype == "bf16"
    lora = next(a for a in pinned.settings["method"].alternatives if a.value == "lora")
    assert "tokens/s" in lora.reason and "GiB per GPU" in lora.reason
    ratio = float(lora.reason.split("tokens/s (")[1].split("x")[0])
    assert ratio > 1  # what the policy read: LoRA is faster than full fine-tuning with bf16 weights
    fp32 = next(a for a in pinned.settings["weights_dtype"].alternatives if a.value == "fp32")
    assert "fits only with" in fp32.reason
    assert any("round away" in w.message for w in pinned.warnings)


def test_full_fine_tuning_without_a_quality_risk_stays_although_lora_is_faster() -> None:
    """GPT-2 on an A100 fits full fine-tuning with AMP's fp32 masters and AdamW: no quality-risk fallback, so
    --method auto keeps it although LoRA would train faster."""
    rec = recommend("gpt2", gpu="a100-80gb", seq_len=1024)
    assert rec.plan.method == "full" and rec.plan.weights_dtype == "fp32" and rec.plan.optimizer == "adamw"
    lora = next(a for a in rec.settings["method"].alternatives if a.value == "lora")
    assert float(lora.reason.split("tokens/s (")[1].split("x")[0]) > 1  # faster, and still not chosen


def test_lora_on_several_gpus_prefers_ddp_when_the_base_fits() -> None:
    """Llama-3.1-8B LoRA on 8 H100s: 42M adapter parameters train, the 16 GB base fits each GPU, so DDP (one
    all-reduce of the adapters' gradients) is chosen over sharding (parallelism.deepspeed-only-when-needed)."""
    rec = recommend("meta-llama/Llama-3.1-8B", gpu="h100-sxm:8", seq_len=4096, method="lora")
    assert rec.plan.parallelism == "ddp"
    fsdp = next(a for a in rec.settings["parallelism"].alternatives if a.value == "fsdp-full-shard")
    assert "adapters train" in fsdp.reason or "not needed" in fsdp.reason or "slower" in fsdp.reason


def test_from_scratch_forbids_adapters() -> None:
    rec = recommend(LLAMA2, gpu="a100-80gb", from_scratch=True)
    assert rec.plan.method == "full"
    with pytest.raises(UsageError, match="--from-scratch"):
        recommend(LLAMA2, gpu="a100-80gb", from_scratch=True, method="lora")
    with pytest.raises(UsageError, match="--from-scratch"):
        estimate(LLAMA2, gpu="a100-80gb", from_scratch=True, method="lora")


def test_lora_needs_far_less_than_full_and_qlora_less_still() -> None:
    kw = dict(gpu="a100-80gb", micro_batch_size=1, seq_len=512, gradient_checkpointing=True)
    full, lora, qlora = (estimate(LLAMA2, method=m, **kw).memory.device_bytes for m in ("full", "lora", "qlora"))
    assert qlora < lora < full / 4


def test_estimate_defaults_adapters_to_a_bf16_base_and_offload_to_zero() -> None:
    est = estimate(LLAMA2, gpu="rtx-4090", method="lora")
    assert est.plan.weights_dtype == "bf16"
    est = estimate(
        LLAMA2,
        gpu="rtx-4090",
        offload="optimizer+parameters",
        gradient_checkpointing=True,
        host_memory_bytes=512 * 2**30,
    )
    assert est.plan.parallelism == "zero-3" and est.memory.fits
    # without --host-memory: checked against the catalog's typical host (64 GiB for an RTX 4090), never unlimited
    assumed = estimate(LLAMA2, gpu="rtx-4090", offload="optimizer+parameters", gradient_checkpointing=True).memory
    assert assumed.host_capacity_bytes == 64 * 2**30 and not assumed.fits


def test_cli_recommend_json_method() -> None:
    out = advisor("recommend", "--model", LLAMA2, "--gpu", "rtx-4090", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["settings"]["method"]["value"] in ("lora", "qlora") and data["memory"]["fits"] is True


def test_litgpt_fsdp_accumulation_holds_unsharded_gradients_of_every_block() -> None:
    """LitGPT accumulates under FSDP's ``no_sync()`` (``fabric.no_backward_sync``), with whole blocks wrapped and
    ``use_orig_params=True``: LoRA's blocks mix frozen weights and adapters, so each device holds a bf16 gradient of
    every block parameter until the last micro-batch (LitGPT's resource table: Llama-2-7B LoRA measures 22.18 GB on
    each of 2 A100s, more than the 21.30 GB of one). The Trainer's plans (``sync_each_batch``), one micro-batch per
    step, and full fine-tuning's own gradients (all of them) follow the same reading."""
    kw = dict(
        gpu="a100-40gb:2",
        parallelism="fsdp-full-shard",
        method="lora",
        lora_rank=8,
        lora_targets="attention",
        weights_dtype="bf16",
        micro_batch_size=1,
        seq_len=1304,
        gradient_checkpointing=True,
    )
    lit = estimate(LLAMA2, framework="litgpt", gradient_accumulation_steps=64, **kw)
    blocks = lit.model.num_parameters - 2 * lit.model.vocab_size * lit.model.hidden_size
    assert lit.memory.components.gradients_bytes == 2 * blocks
    for other in (
        estimate(LLAMA2, gradient_accumulation_steps=64, **kw),
        estimate(LLAMA2, framework="litgpt", gradient_accumulation_steps=1, **kw),
    ):
        assert other.memory.components.gradients_bytes < blocks // 100
    full = {k: v for k, v in kw.items() if not k.startswith("lora") and k != "method"}
    lit_full = estimate(LLAMA2, framework="litgpt", gradient_accumulation_steps=4, **full)
    assert lit_full.memory.components.gradients_bytes == 2 * lit_full.model.num_parameters
    sharded = estimate(LLAMA2, gradient_accumulation_steps=4, **full).memory.components.gradients_bytes
    assert sharded == 2 * lit_full.model.num_parameters // 2  # bf16 shards over 2 GPUs


@pytest.mark.slow
def test_a_70b_qlora_on_two_24gb_gpus_is_fsdp_with_the_base_offloaded_never_tensor_parallel() -> None:
    # Answer.AI's fsdp_qlora recipe (README, "A 70B QLoRA on two 24 GB GPUs"): bitsandbytes' 4-bit layers do not split
    # over tensor-parallel ranks, so the NVLink-bridged pair shards the base with FSDP and offloads it to CPU RAM
    config = "meta-llama/Llama-2-70b-hf"
    rec = recommend(config, gpu="rtx-3090:2", method="qlora", seq_len=2048, host_memory_bytes=128 * 10**9)
    plan = rec.plan
    assert (plan.tensor_parallel, plan.pipeline_parallel) == (1, 1) and rec.memory.fits
    assert (plan.parallelism, plan.offload) == ("fsdp-full-shard", "optimizer+parameters")
    # the explanation says why tensor parallelism is out (the search refused every layout with it), not "not needed"
    tp = rec.settings["tensor_parallel"]
    assert "4-bit layers" in tp.rationale and "not needed" not in tp.rationale
    assert [a.value for a in tp.alternatives if "4-bit layers" in a.reason] == [2]
    with pytest.raises(UsageError, match="4-bit layers"):
        estimate(config, gpu="rtx-3090:2", method="qlora", seq_len=2048, tensor_parallel=2)


def test_a_bitsandbytes_4bit_checkpoint_is_planned_as_qlora_and_a_gptq_one_is_refused(tmp_path) -> None:
    """An unsloth-style *-bnb-4bit checkpoint holds NF4 weights only: QLoRA over them with the checkpoint's own
    double quantization, never full fine-tuning or LoRA (refused in one line naming the original model); a GPTQ
    checkpoint is one line and exit 2, not a plan priced for weights it does not hold."""
    base = json.loads((ROOT / "probes" / "configs" / "meta-llama--Llama-3.1-8B.json").read_text())
    bnb, gptq = tmp_path / "bnb" / "config.json", tmp_path / "gptq" / "config.json"
    for path, q in (
        (bnb, {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": False}),
        (gptq, {"quant_method": "gptq", "bits": 4}),
    ):
        path.parent.mkdir()
        path.write_text(json.dumps({**base, "quantization_config": q}))
    rec = recommend(str(bnb), gpu="a100-80gb")
    assert (rec.plan.method, rec.plan.double_quant) == ("qlora", False)
    assert any("the only method" in w.message for w in rec.warnings)
    assert estimate(str(bnb), gpu="a100-80gb", method="qlora").plan.double_quant is False
    with pytest.raises(UsageError, match="original 16-bit model"):
        recommend(str(bnb), gpu="a100-80gb", method="full")
    out = advisor("recommend", "--model", str(gptq), "--gpu", "a100-80gb")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "gptq 4-bit" in out.stderr, out.stderr


def test_lora_before_ampere_holds_the_frozen_base_in_fp16() -> None:
    """Mistral-7B LoRA on a V100 32GB under fp16: the frozen base loads in fp16 (2 B/weight, no fp32 copy with
    autocast's 16-bit casts beside it), so estimate's default prices about 14 GB of weights, not 42 GB, and
    recommend plans LoRA on the fp16 base where it used to need QLoRA (method.fp16-frozen-base)."""
    kw = dict(
        gpu="v100-32gb", method="lora", precision="fp16", seq_len=2048, micro_batch_size=1, gradient_checkpointing=True
    )
    est = estimate("mistralai/Mistral-7B-v0.1", **kw)
    assert est.plan.weights_dtype == "fp16"
    assert est.memory.device_bytes < 18 * 2**30
    fp32 = estimate("mistralai/Mistral-7B-v0.1", weights_dtype="fp32", **kw)
    assert fp32.memory.device_bytes > 2.4 * est.memory.device_bytes
    rec = recommend("mistralai/Mistral-7B-v0.1", gpu="v100-32gb", seq_len=2048)
    assert (rec.plan.method, rec.plan.weights_dtype, rec.plan.precision) == ("lora", "fp16", "fp16")
    with pytest.raises(UsageError, match="fp16 weights that train"):
        estimate("mistralai/Mistral-7B-v0.1", gpu="v100-32gb", method="full", precision="fp16", weights_dtype="fp16")


def test_lora_all_linear_on_a_mixture_of_experts_trains_the_routed_experts_and_prices_them() -> None:
    """Qwen3-30B-A3B: all-linear reaches the routed experts (PEFT's target_parameters on transformers 5's 3-D expert
    parameters), the card says so and what it costs; the merged expert weights are priced (memory held to the backward
    without checkpointing, HBM passes per micro-batch); attention targets leave them frozen and say so."""
    from advisor.engine.experts import merged_expert_bytes, merged_expert_traffic_bytes
    from probes.adapters import expert_adapter_parameters

    rec = recommend("Qwen/Qwen3-30B-A3B", gpu="a100-80gb", seq_len=2048, method="lora")
    warning = next(w.message for w in rec.warnings if w.rule_id == "method.adapters-when-full-does-not-fit")
    assert "routed experts" in warning and "target_parameters" in warning and "% of the model" in warning
    assert "close to full fine-tuning" not in warning and "stay frozen" not in warning
    assert "target_parameters" in rec.settings["lora_targets"].rationale
    model = rec.model
    experts = expert_adapter_parameters(model, 16, "all-linear")  # r·E·(h + 2f)·2 + r·E·(f + h) per MoE block
    f = 768
    assert experts == 48 * 16 * 128 * (2 * (2048 + 2 * f) + (f + 2048))
    plan = rec.plan.model_copy(update={"gradient_checkpointing": False})
    held, backward = merged_expert_bytes(model, plan)
    assert held == 48 * backward and backward == model.routed_parameters // 48 * 2  # a bf16 copy of each block
    checkpointed = rec.plan.model_copy(update={"gradient_checkpointing": True})
    assert merged_expert_bytes(model, checkpointed) == (0, 2 * backward)
    assert merged_expert_traffic_bytes(model, checkpointed) == 7 * 48 * backward
    attention = recommend("Qwen/Qwen3-30B-A3B", gpu="a100-80gb", seq_len=2048, method="lora", lora_targets="attention")
    frozen = next(w.message for w in attention.warnings if w.rule_id == "method.adapters-when-full-does-not-fit")
    assert "stay frozen" in frozen and "stay frozen" in attention.settings["lora_targets"].rationale
    assert merged_expert_bytes(model, attention.plan) == (0, 0)
    assert attention.speed.tokens_per_s > rec.speed.tokens_per_s
    dense = recommend("meta-llama/Llama-3.1-8B", gpu="a100-80gb", seq_len=2048, method="lora")
    assert any("close to full fine-tuning" in w.message for w in dense.warnings)
