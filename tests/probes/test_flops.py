"""The speed model's FLOP count against torch's FlopCounterMode on a fake forward pass.

Eager attention is used so the counter sees the QK^T and AV matmuls (on the CPU, SDPA has no FLOP
formula); the count is then exactly 2·N·T + 4·b·s²·(heads·head_dim) per attention block.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from advisor.engine.speed import forward_flops  # noqa: E402
from probes.model import profile_model  # noqa: E402

CONFIGS = {
    "gpt2": {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_layer": 2,
        "n_embd": 128,
        "n_head": 4,
        "vocab_size": 1000,
        "n_positions": 256,
    },
    "llama": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "intermediate_size": 352,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 256,
    },
    "bert": {
        "model_type": "bert",
        "architectures": ["BertForMaskedLM"],
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "max_position_embeddings": 256,
    },
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_forward_flops_match_flop_counter(tmp_path, name) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    cfg = dict(CONFIGS[name])
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    profile = profile_model(str(tmp_path))
    model_type = cfg.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    config._attn_implementation = "eager"
    b, s = 2, 64
    with FakeTensorMode():
        model = (
            transformers.AutoModelForCausalLM.from_config(config)
            if name != "bert"
            else transformers.AutoModelForMaskedLM.from_config(config)
        )
        ids = torch.randint(0, 1000, (b, s))
        with FlopCounterMode(display=False) as counter:
            model(input_ids=ids)
    assert counter.get_total_flops() == pytest.approx(forward_flops(profile, b, s), rel=0.01)


MOE_CONFIGS = {
    "mixtral": {
        "model_type": "mixtral",
        "architectures": ["MixtralForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "intermediate_size": 192,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 256,
    },
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        "architectures": ["Qwen2MoeForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_experts": 8,
        "num_experts_per_tok": 3,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 160,
        "vocab_size": 1000,
        "max_position_embeddings": 256,
    },
}


@pytest.mark.parametrize("name", list(MOE_CONFIGS))
def test_moe_forward_flops_count_the_chosen_experts_and_the_router(tmp_path, name) -> None:
    """Routing depends on the values, so the tiny model runs on real CPU tensors with transformers' eager
    experts (a loop of per-expert linears the counter sees); every token meets k experts whatever the routing."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = dict(MOE_CONFIGS[name])
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    profile = profile_model(str(tmp_path))
    assert profile.active_matmul_parameters < profile.matmul_parameters
    model_type = cfg.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    config._attn_implementation, config._experts_implementation = "eager", "eager"
    b, s = 2, 64
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, 1000, (b, s)))
    assert counter.get_total_flops() == pytest.approx(forward_flops(profile, b, s), rel=0.01)


def test_capacity_factor_pads_only_the_routed_experts() -> None:
    """Fedus et al. 2021 (https://arxiv.org/abs/2101.03961) sec. 2.2: experts compute on capacity-sized buffers."""
    mixtral = profile_model("mistralai/Mixtral-8x7B-v0.1")
    padded = mixtral.model_copy(update={"capacity_factor": 1.25})
    routed = 2 * 3 * 4096 * 14336 * 32  # top-2 of the experts' SwiGLU matrices in 32 blocks
    assert mixtral.routed_active_matmul_parameters == routed
    assert forward_flops(padded, 1, 512) - forward_flops(mixtral, 1, 512) == pytest.approx(2 * 0.25 * routed * 512)
