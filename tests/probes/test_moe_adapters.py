"""LoRA all-linear on a mixture of experts reaches the routed experts: the LoraConfig advisor writes (target_parameters on
the experts' 3-D gate_up_proj / down_proj and the routers' gate.weight, gate_up at rank 2r) loads in the installed PEFT,
wraps tiny random Qwen3-MoE, Mixtral, DeepSeek-V2 and Qwen2-MoE models on the CPU, trains their experts' adapters, and
holds the trainable parameters probes.adapters prices (issue 42)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # torch, transformers and peft

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch  # noqa: E402

from probes.adapters import adapter_parameters, expert_adapter_parameters, expert_width  # noqa: E402
from probes.lora_config import lora_config_kwargs  # noqa: E402
from probes.model import profile_from_config  # noqa: E402

_BASE = dict(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    torch_dtype="bfloat16",
    tie_word_embeddings=False,
)
TINY_MOE = {
    "qwen3_moe": dict(
        _BASE,
        model_type="qwen3_moe",
        architectures=["Qwen3MoeForCausalLM"],
        head_dim=16,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    ),
    "mixtral": dict(
        _BASE,
        model_type="mixtral",
        architectures=["MixtralForCausalLM"],
        intermediate_size=32,
        num_local_experts=8,
        num_experts_per_tok=2,
    ),
    "deepseek_v2": dict(
        _BASE,
        model_type="deepseek_v2",
        architectures=["DeepseekV2ForCausalLM"],
        num_key_value_heads=4,
        intermediate_size=96,
        moe_intermediate_size=32,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
        kv_lora_rank=16,
        q_lora_rank=None,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
        n_group=1,
        topk_group=1,
    ),
    "qwen2_moe": dict(
        _BASE,
        model_type="qwen2_moe",
        architectures=["Qwen2MoeForCausalLM"],
        intermediate_size=96,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
        num_experts=8,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    ),
}
RANK = 4


def _wrapped(raw: dict):
    import transformers
    from peft import LoraConfig, get_peft_model

    config = transformers.AutoConfig.for_model(**{k: v for k, v in raw.items() if k != "architectures"})
    net = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model = profile_from_config(raw, raw["model_type"])
    return model, get_peft_model(net, LoraConfig(**lora_config_kwargs(model, RANK, "all-linear")))


@pytest.mark.parametrize("model_type", sorted(TINY_MOE))
def test_all_linear_adapters_reach_the_routed_experts_as_priced(model_type) -> None:
    model, net = _wrapped(TINY_MOE[model_type])
    assert expert_width(model) == TINY_MOE[model_type].get("moe_intermediate_size", 32)
    trainable = {n: p for n, p in net.named_parameters() if p.requires_grad}
    experts = sum(p.numel() for n, p in trainable.items() if ".experts." in n)
    assert experts == expert_adapter_parameters(model, RANK, "all-linear") > 0
    routers = sum(p.numel() for n, p in trainable.items() if ".mlp.gate.lora_" in n)
    assert routers == RANK * (model.hidden_size + model.num_experts) * model.moe_layers
    if model_type in ("qwen3_moe", "mixtral"):  # no shared experts, no dense blocks; plain attention
        assert sum(p.numel() for p in trainable.values()) == adapter_parameters(model, RANK, "all-linear")
    assert all(p.dtype == torch.float32 for p in trainable.values())  # PEFT's fp32 adapters over the bf16 base
    ids = torch.randint(0, 128, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        net(input_ids=ids, labels=ids).loss.backward()
    grads = [
        p.grad for n, p in trainable.items() if ".experts." in n and "lora_B" in n
    ]  # B starts at 0: A gets none yet
    assert grads and all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


def test_attention_targets_leave_the_experts_frozen_and_write_no_target_parameters() -> None:
    model, net = _wrapped(dict(TINY_MOE["qwen3_moe"]))
    kwargs = lora_config_kwargs(model, RANK, "attention")
    assert "target_parameters" not in kwargs and expert_adapter_parameters(model, RANK, "attention") == 0
