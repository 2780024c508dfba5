"""The speed model's FLOP count against torch's FlopCounterMode on a fake forward pass.

Eager attention is used so the counter sees the QK^T and AV matmuls (on the CPU, SDPA has no FLOP
formula); the count is then exactly 2·N·T + 4·b·s²·(heads·head_dim) per attention block.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from advisor.engine.speed import forward_flops  # noqa: E402
from probes.model import profile_model  # noqa: E402

CONFIGS = {
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 128, "n_head": 4,
             "vocab_size": 1000, "n_positions": 256},
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
              "hidden_size": 128, "intermediate_size": 352, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 1000, "max_position_embeddings": 256},
    "bert": {"model_type": "bert", "architectures": ["BertForMaskedLM"], "num_hidden_layers": 2, "hidden_size": 128,
             "intermediate_size": 512, "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 256},
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
        model = transformers.AutoModelForCausalLM.from_config(config) if name != "bert" else \
            transformers.AutoModelForMaskedLM.from_config(config)
        ids = torch.randint(0, 1000, (b, s))
        with FlopCounterMode(display=False) as counter:
            model(input_ids=ids)
    assert counter.get_total_flops() == pytest.approx(forward_flops(profile, b, s), rel=0.01)
