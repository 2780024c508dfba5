"""Closed-form parameter counts equal what transformers counts on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)

from probes.architectures import FAMILIES, MISSING_TASKS
from advisor.core.vocabulary import Family, Task
from probes.model import _catalog_dir, catalog_ids, profile_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _meta_count(model_id: str, task: str) -> int:
    config = json.loads(_catalog_dir().joinpath(model_id.replace("/", "--") + ".json").read_text())
    model_type = config.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        model = getattr(transformers, Task(task).auto_class).from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def _config(model_id: str) -> dict:
    return json.loads(_catalog_dir().joinpath(model_id.replace("/", "--") + ".json").read_text())


def _tasks(model_id: str) -> list[str]:
    """The family's task heads; for a catalog type without a closed form (counted on the meta device, so the
    test checks the MoE facts below), those transformers has an Auto class mapping for."""
    config = _config(model_id)
    if config["model_type"] in FAMILIES:  # less the heads transformers lacks for the type (gemma2, phi3: no QA)
        missing = MISSING_TASKS.get(config["model_type"], frozenset())
        return [t for t in Family(FAMILIES[config["model_type"]]).tasks if t not in missing]
    cfg_class = type(transformers.AutoConfig.for_model(config["model_type"]))
    return [
        t for t in Family.DECODER_ONLY.tasks if cfg_class in getattr(transformers, Task(t).auto_class)._model_mapping
    ]


CASES = [(m, t) for m in catalog_ids() for t in _tasks(m)]


@pytest.mark.parametrize("model_id, task", CASES, ids=[f"{m}:{t}" for m, t in CASES])
def test_closed_form_equals_transformers_meta_count(model_id: str, task: str) -> None:
    assert profile_model(model_id, task).num_parameters == _meta_count(model_id, task)


def test_published_counts() -> None:
    assert profile_model("gpt2").num_parameters == 124_439_808  # tied embeddings counted once
    assert profile_model("meta-llama/Llama-2-7b-hf").num_parameters == 6_738_415_616
    assert profile_model("meta-llama/Meta-Llama-3-8B").num_parameters == 8_030_261_248
    assert profile_model("meta-llama/Llama-3.1-8B").num_parameters == 8_030_261_248
    assert profile_model("meta-llama/Llama-3.1-70B").num_parameters == 70_553_706_496
    assert profile_model("Qwen/Qwen2.5-7B").num_parameters == 7_615_616_512
    nemo = profile_model("mistralai/Mistral-Nemo-Base-2407")  # head_dim 128, not 5120 / 32
    assert nemo.num_parameters == 12_247_782_400 and nemo.head_dim == 128
    assert profile_model("huggyllama/llama-65b").num_parameters == 65_285_660_672
    # PEFT's MetaMathQA result file for Llama-3.2-3B's full fine-tuning (method_comparison/MetaMathQA/results/
    # full-finetuning--llama-3.2-3B-lr_0.00001.json at 51c2ff66; benchmarks/published/peft-method-comparison.jsonl)
    # trains all 3,212,749,824 parameters, the tied head counted once
    assert profile_model("meta-llama/Llama-3.2-3B").num_parameters == 3_212_749_824
    qwen3 = profile_model("Qwen/Qwen3-8B")  # QK-Norm, no biases; Qwen's model card: 8.2B
    assert qwen3.num_parameters == 8_190_735_360 and qwen3.parameter_count_method == "closed-form"


@pytest.mark.parametrize(
    "model_id, total, active, published_total, published_active, rel_active",
    [
        # Mistral AI, "Mixtral of experts" (https://mistral.ai/news/mixtral-of-experts): 46.7B total, 12.9B per token
        ("mistralai/Mixtral-8x7B-v0.1", 46_702_792_704, 12_879_925_248, 46.7e9, 12.9e9, 0.01),
        # Qwen, "Qwen1.5-MoE" (https://qwenlm.github.io/blog/qwen-moe/): 14.3B total, 2.7B activated
        ("Qwen/Qwen1.5-MoE-A2.7B", 14_315_784_192, 2_689_173_504, 14.3e9, 2.7e9, 0.01),
        # DeepSeek-AI 2024, DeepSeek-V2 (https://arxiv.org/abs/2405.04434) appendix B: 15.7B total, 2.4B activated,
        # which leaves out the 0.21B input embedding (a lookup): 2.66B - 0.21B = 2.45B
        ("deepseek-ai/DeepSeek-V2-Lite", 15_706_484_224, 2_661_150_208, 15.7e9, 2.45e9 + 102400 * 2048, 0.01),
        # Qwen3-30B-A3B's model card (https://huggingface.co/Qwen/Qwen3-30B-A3B): 30.5B in total and 3.3B activated,
        # the latter truncated: 48 blocks' attention 0.906B + 8 of 128 experts 1.812B + routers + embedding and head
        ("Qwen/Qwen3-30B-A3B", 30_532_122_624, 3_353_032_704, 30.5e9, 3.3e9, 0.02),
    ],
)
def test_moe_total_and_active_counts(model_id, total, active, published_total, published_active, rel_active) -> None:
    p = profile_model(model_id)
    assert (p.num_parameters, p.active_parameters) == (total, active)
    assert p.num_parameters == pytest.approx(published_total, rel=0.005)
    assert p.active_parameters == pytest.approx(published_active, rel=rel_active)
    assert p.active_parameters == _active_on_meta_device(model_id)
    assert p.active_matmul_parameters < p.active_parameters < p.num_parameters
    assert p.capacity_factor is None  # dropless in transformers


def test_moe_facts() -> None:
    mixtral = profile_model("mistralai/Mixtral-8x7B-v0.1")
    assert (mixtral.num_experts, mixtral.experts_per_token, mixtral.shared_experts, mixtral.moe_layers) == (8, 2, 0, 32)
    qwen = profile_model("Qwen/Qwen1.5-MoE-A2.7B")
    assert (qwen.num_experts, qwen.experts_per_token, qwen.shared_experts, qwen.moe_layers) == (60, 4, 1, 24)
    deepseek = profile_model("deepseek-ai/DeepSeek-V2-Lite")  # first_k_dense_replace = 1: block 0 is dense
    assert (deepseek.num_experts, deepseek.experts_per_token, deepseek.shared_experts, deepseek.moe_layers) == (
        64,
        6,
        2,
        26,
    )
    assert deepseek.parameter_count_method == "meta-device"
    # transformers 5.23 stores a block's experts as one fused (E, 2·ffn, h) tensor: the optimizer's largest tensor
    assert mixtral.largest_parameter_elements == 8 * 2 * 14336 * 4096
    dense = profile_model("meta-llama/Llama-3.1-8B")
    assert (dense.num_experts, dense.moe_layers, dense.active_parameters) == (0, 0, dense.num_parameters)
    assert dense.active_matmul_parameters == dense.matmul_parameters


def _active_on_meta_device(model_id: str) -> int:
    """Parameters a token uses, counted on transformers' model: a routed expert tensor (``….experts.…``,
    leading dimension E) contributes k/E of its elements."""
    config = _config(model_id)
    model_type = config.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    k = cfg.num_experts_per_tok
    return sum(p.numel() * k // p.shape[0] if ".experts." in n else p.numel() for n, p in model.named_parameters())


TINY_MOE = [
    {
        "model_type": "mixtral",
        "architectures": ["MixtralForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": 500,
        "tie_word_embeddings": True,
    },
    {
        "model_type": "qwen2_moe",
        "architectures": ["Qwen2MoeForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_experts": 6,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 80,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
        "vocab_size": 500,
    },
    {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_experts": 6,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
        "vocab_size": 500,
    },
]


@pytest.mark.parametrize("config", TINY_MOE, ids=[c["model_type"] for c in TINY_MOE])
def test_moe_closed_form_equals_the_meta_device_fallback(config) -> None:
    """The closed form and the generic meta-device MoE detection agree, field by field (sparse steps,
    dense-only blocks and tied embeddings included)."""
    from probes.architectures import BUILDERS
    from probes.meta_count import shape_on_meta_device
    from probes.model import default_task

    meta, *_ = shape_on_meta_device(config, None, 2, default_task)
    closed = BUILDERS[config["model_type"]](config, "causal-lm", 2)
    fields = (
        "num_parameters",
        "matmul_parameters",
        "active_parameters",
        "active_matmul_parameters",
        "num_experts",
        "experts_per_token",
        "shared_experts",
        "moe_layers",
        "ffn",
        "capacity_factor",
    )
    assert {f: getattr(closed, f) for f in fields} == {f: getattr(meta, f) for f in fields}
    assert closed.num_parameters == _count_config(config)


@pytest.mark.parametrize("extra", [{}, {"head_dim": 16, "attention_bias": True, "tie_word_embeddings": True}])
def test_qwen3_closed_form_equals_transformers(extra) -> None:
    """Qwen3Config's head_dim is 128 when a config leaves it out (not hidden / heads); biases and tied embeddings
    as asked."""
    from probes.architectures import BUILDERS

    config = {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 500,
        **extra,
    }
    shape = BUILDERS["qwen3"](config, "causal-lm", 2)
    assert shape.num_parameters == _count_config(config)
    assert shape.head_dim == extra.get("head_dim", 128)


def test_meta_device_fallback_for_other_architectures(tmp_path) -> None:
    config = {
        "model_type": "gpt_neo",
        "architectures": ["GPTNeoForCausalLM"],
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 4,
        "attention_types": [[["global", "local"], 1]],
        "vocab_size": 1000,
        "max_position_embeddings": 128,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    profile = profile_model(str(tmp_path))
    assert profile.parameter_count_method == "meta-device"
    assert profile.num_parameters == _count_config(config)
    assert profile.family == "decoder-only" and profile.task == "causal-lm"


def _count_config(config: dict) -> int:
    cfg = dict(config)
    model_type = cfg.pop("model_type")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **cfg))
    return sum(p.numel() for p in model.parameters())


def test_factored_statistics_match_transformers_adafactor_on_fused_experts(tmp_path) -> None:
    """Adafactor keeps a row and a column statistic per expert of a fused (E, rows, columns) tensor."""
    config = dict(TINY_MOE[0])
    (tmp_path / "config.json").write_text(json.dumps(config))
    profile = profile_model(str(tmp_path))
    model_type = config.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    cfg._experts_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    optimizer = transformers.optimization.Adafactor(
        model.parameters(), lr=1e-3, scale_parameter=False, relative_step=False
    )
    model(input_ids=torch.randint(0, 500, (1, 8)), labels=torch.randint(0, 500, (1, 8))).loss.backward()
    optimizer.step()
    stats = sum(
        t.numel()
        for state in optimizer.state.values()
        for k, t in state.items()
        if k in ("exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq")
    )
    assert stats == profile.factored_statistics_elements


_PUBLISHED_CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "configs"
TINY_GEMMA_PHI = [
    {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3ForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 500,
    },
    {
        "model_type": "gemma",
        "architectures": ["GemmaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "vocab_size": 500,
        "attention_bias": True,
        "tie_word_embeddings": False,
    },
    {
        "model_type": "phi3",
        "architectures": ["Phi3ForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 500,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
    },
]
GEMMA_PHI = [
    json.loads((_PUBLISHED_CONFIGS / m / "config.json").read_text())
    for m in (
        "google--gemma-2b",
        "google--gemma-7b",
        "google--gemma-2-2b",
        "google--gemma-2-9b",
        "microsoft--Phi-3-mini-4k-instruct",
    )
] + TINY_GEMMA_PHI


@pytest.mark.parametrize("config", GEMMA_PHI, ids=[f"{c['model_type']}-{c['hidden_size']}" for c in GEMMA_PHI])
def test_gemma_and_phi3_closed_forms_equal_the_meta_device_profile(config, monkeypatch) -> None:
    """Gemma 1-3 and Phi-3 in closed form (no torch): every field of the profile equals what transformers' model on the
    meta device gives (parameters, the tensors' shapes the optimizer and Adafactor see, the attention kernels: Gemma 2
    has no SDPA path), for each task head transformers has, and the head it lacks is refused."""
    from probes.architectures import BUILDERS, MISSING_TASKS
    from advisor.core.errors import UsageError
    from probes.model import profile_from_config

    model_type = config["model_type"]
    for task in Family.DECODER_ONLY.tasks:
        if task in MISSING_TASKS[model_type]:
            with pytest.raises(UsageError, match="does not fit"):
                profile_from_config(config, "m", task=task)
            continue
        closed = profile_from_config(config, "m", task=task)
        with monkeypatch.context() as m:
            m.delitem(BUILDERS, model_type)  # probes.model reads the same dict
            meta = profile_from_config(config, "m", task=task)
        assert (closed.parameter_count_method, meta.parameter_count_method) == ("closed-form", "meta-device")
        skip = {"parameter_count_method", "parameter_shapes", "supported_tasks"}
        assert closed.model_dump(exclude=skip) == meta.model_dump(exclude=skip)
        assert sorted(s for s, n in closed.parameter_shapes for _ in range(n)) == sorted(
            s for s, n in meta.parameter_shapes for _ in range(n)
        )
        assert Task.QUESTION_ANSWERING not in closed.supported_tasks
