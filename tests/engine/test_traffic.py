"""advisor.engine.traffic: the memory-bound traffic the speed model prices, calibrated on counted fake-tensor steps
(benchmarks/calibrate_traffic.py, advisor/data/traffic.json)."""

from __future__ import annotations

import json

import pytest

from advisor.engine.calibration import calibration_keys
from advisor.engine.memory import activation_traffic_bytes
from advisor.engine.traffic import (
    COMPILE_ELEMENTWISE_TRAFFIC,
    FEATURES,
    FLCE_BYTES_PER_LOGIT,
    _table,
    eager_traffic_bytes,
    elementwise_traffic_bytes,
    fallback_ratio,
    routing_traffic_bytes,
    traffic_features,
)
from probes.model import profile_model as load_model
from advisor.core.plan import Plan
from conftest import cuda_plan  # noqa: E402


def _plan(**kw) -> Plan:
    return cuda_plan(**{"micro_batch_size": 2, "weights_dtype": "bf16", **kw})


def test_every_calibrated_family_has_its_base_columns_and_they_priced_their_full_depth() -> None:
    from benchmarks.calibrate_activations import FAMILIES

    table = _table()
    for family in FAMILIES:
        columns = table[family]
        assert {"fp32", "mixed", "bf16"} <= set(columns), family
        for key, c in columns.items():
            # checked at the family's reference model, its whole depth: eager within 3 %, checkpointed within 12 %
            assert abs(c["reference"]["depth_error"]) < 0.03, (family, key)
            assert abs(c["reference"]["checkpointed_error"]) < 0.12, (family, key)
    assert 2.0 < fallback_ratio() < 5.0


def test_an_eager_llama_step_moves_several_times_its_saved_activations() -> None:
    model = load_model("meta-llama/Llama-2-7b-hf")
    plan = _plan(method="lora", lora_targets="all-linear", lora_rank=16)
    eager = eager_traffic_bytes(model, plan, 2048)
    assert eager > 3 * 3 * activation_traffic_bytes(model, plan, 2048)
    # checkpointing recomputes the blocks' forward: more traffic, less than a second step
    ckpt = eager_traffic_bytes(model, plan.model_copy(update={"gradient_checkpointing": True}), 2048)
    assert eager * 1.2 < ckpt < eager * 2
    # eager attention adds the s x s scores' softmax and its backward
    assert eager_traffic_bytes(model, plan.model_copy(update={"attention": "eager"}), 2048) > eager * 1.1


def test_a_mixture_of_experts_adds_its_routing_to_its_dense_kins_traffic() -> None:
    """Qwen3-30B-A3B's blocks move their dense kin's (Qwen3's) traffic plus the routing's gathers, weights, scatters and
    fp32 sums of its S = tokens x 8 rows (traffic.ROUTING_BYTES): as much again at 4096 tokens; it grows with the
    tokens, the recomputed forward adds its forward share, and a dense model has none."""
    moe = load_model("Qwen/Qwen3-30B-A3B")
    plan = _plan(micro_batch_size=1)
    routing = routing_traffic_bytes(moe, plan, 4096)
    rows = 4096 * 8 * moe.hidden_size
    assert routing == pytest.approx(moe.moe_layers * (28.73 * rows + 46.90 * rows + 13.10 * 4096 * 8 * 768))
    assert 0.5 < routing / (eager_traffic_bytes(moe, plan, 4096) - routing) < 2
    assert routing_traffic_bytes(moe, plan, 8192) == pytest.approx(2 * routing)
    ckpt = routing_traffic_bytes(moe, plan.model_copy(update={"gradient_checkpointing": True}), 4096)
    assert ckpt == pytest.approx(routing + moe.moe_layers * 28.73 * rows)
    assert routing_traffic_bytes(load_model("meta-llama/Llama-2-7b-hf"), plan, 4096) == 0.0


def test_fused_kernels_and_compile_shrink_it_and_other_stacks_fall_back() -> None:
    model = load_model("meta-llama/Llama-2-7b-hf")
    plan = _plan()
    eager = elementwise_traffic_bytes(model, plan, 1024)
    assert eager == pytest.approx(eager_traffic_bytes(model, plan, 1024))
    liger = elementwise_traffic_bytes(model, plan.model_copy(update={"loss_kernel": "liger"}), 1024)
    assert liger < eager
    compiled = elementwise_traffic_bytes(model, plan.model_copy(update={"torch_compile": True}), 1024)
    assert compiled < COMPILE_ELEMENTWISE_TRAFFIC * eager
    # Megatron's fused layers: the saved activations x 3; LitGPT's step: that times the fallback ratio
    megatron = elementwise_traffic_bytes(model, plan.model_copy(update={"framework": "megatron"}), 1024)
    assert megatron == pytest.approx(
        3 * activation_traffic_bytes(model, plan.model_copy(update={"framework": "megatron"}), 1024)
    )
    litgpt = plan.model_copy(update={"framework": "litgpt"})
    assert eager_traffic_bytes(model, litgpt, 1024) is None
    assert elementwise_traffic_bytes(model, litgpt, 1024) == pytest.approx(
        3 * activation_traffic_bytes(model, litgpt, 1024) * fallback_ratio()
    )


@pytest.mark.slow
def test_the_calibration_fits_a_tiny_family_and_prices_its_full_depth(tmp_path, monkeypatch) -> None:
    """benchmarks/calibrate_traffic.py end to end on a tiny Llama: the fit from 1-3 layers prices its 8 layers."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from benchmarks import calibrate_traffic
    from benchmarks.calibrate_activations import VARIANTS

    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 128,
                "intermediate_size": 256,
                "num_hidden_layers": 8,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 512,
                "max_position_embeddings": 2048,
            }
        )
    )
    monkeypatch.setitem(
        calibrate_traffic.FAMILIES, "tiny", (str(config), ["num_hidden_layers"], "intermediate_size", None)
    )
    for variant in VARIANTS:  # fp32; autocast over fp32 weights; bf16 weights
        coef = calibrate_traffic.calibrate("tiny", variant)
        assert max(coef["fit_worst_relative_residual"].values()) < 0.02
        check = calibrate_traffic.reference_check("tiny", variant, coef)
        assert abs(check["depth_error"]) < 0.03
        assert abs(check["checkpointed_error"]) < 0.12
        assert check["former_ratio"] > 1.5


def test_liger_is_counted_with_its_kernels_where_the_family_has_them() -> None:
    from benchmarks.liger_standins import LIGER_FAMILIES

    for family in LIGER_FAMILIES:
        for key, c in _table()[family].items():
            # counted with the model's own loss: the logits' terms are the eager column's, within the fits' noise
            logits = FEATURES.index("sbv")
            for phase in ("forward", "backward"):
                assert c["liger"][phase][logits] == pytest.approx(c[phase][logits], rel=0.05, abs=0.5), key
            # per block (L·sbh, L·sbf) the fused kernels move less than eager's chain of ops
            assert c["liger"]["forward"][0] + c["liger"]["backward"][0] < c["forward"][0] + c["backward"][0], key
    model = load_model("meta-llama/Llama-2-7b-hf")
    plan = _plan(method="lora", lora_targets="all-linear", lora_rank=16)
    liger = plan.model_copy(update={"loss_kernel": "liger"})
    assert eager_traffic_bytes(model, liger, 2048) < 0.8 * eager_traffic_bytes(model, plan, 2048)
    assert elementwise_traffic_bytes(model, liger, 2048) == pytest.approx(eager_traffic_bytes(model, liger, 2048))
    # Liger's layers with the model's own loss: its layers' savings, the whole logits' traffic; the fused loss
    # moves FLCE_BYTES_PER_LOGIT a logit in their place
    layers = plan.model_copy(update={"loss_kernel": "liger-layers"})
    x = traffic_features(model, 2, 2048)[FEATURES.index("sbv")]
    c = _table()["llama"][next(k for k in calibration_keys(plan) if k in _table()["llama"])]
    head = sum(c["liger"][phase][FEATURES.index("sbv")] for phase in ("forward", "backward"))
    assert (
        eager_traffic_bytes(model, liger, 2048)
        < eager_traffic_bytes(model, layers, 2048)
        < eager_traffic_bytes(model, plan, 2048)
    )
    assert eager_traffic_bytes(model, layers, 2048) - eager_traffic_bytes(model, liger, 2048) == pytest.approx(
        (head - FLCE_BYTES_PER_LOGIT) * x
    )
    # phi3 (a fused gate_up projection): Liger not counted, the activation ratio prices it
    phi3 = load_model("microsoft/Phi-3-mini-4k-instruct")
    assert eager_traffic_bytes(phi3, liger, 2048) is None
    assert elementwise_traffic_bytes(phi3, liger, 2048) < eager_traffic_bytes(phi3, plan, 2048)


def test_the_liger_stand_ins_replace_the_modules_only_within_their_block() -> None:
    pytest.importorskip("torch")
    from transformers.models.llama import modeling_llama

    from benchmarks.liger_standins import liger_standins

    before = (modeling_llama.LlamaRMSNorm.forward, modeling_llama.apply_rotary_pos_emb)
    with liger_standins("llama"):
        assert modeling_llama.LlamaRMSNorm.forward is not before[0]
        assert modeling_llama.apply_rotary_pos_emb is not before[1]
    assert (modeling_llama.LlamaRMSNorm.forward, modeling_llama.apply_rotary_pos_emb) == before
