"""Model resolution (local path, HF cache, catalog; never the network offline) and bad configs."""

from __future__ import annotations

import json
import time

import pytest

from advisor.core.errors import BadConfigError, ModelNotFoundError, UsageError
from probes.model import catalog_ids, profile_model
from cli_runner import ROOT

REQUIRED = [
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "distilbert-base-uncased",
    "bert-base-uncased",
    "bert-large-uncased",
    "roberta-base",
    "t5-small",
    "t5-base",
    "facebook/opt-125m",
    "facebook/opt-1.3b",
    "meta-llama/Llama-2-7b-hf",
    "mistralai/Mistral-7B-v0.1",
    "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B",
    "Qwen/Qwen2.5-7B",
    "mistralai/Mistral-Nemo-Base-2407",
    "huggyllama/llama-65b",
    "mistralai/Mixtral-8x7B-v0.1",
    "Qwen/Qwen1.5-MoE-A2.7B",
    "deepseek-ai/DeepSeek-V2-Lite",
]


def test_catalog_holds_the_required_models() -> None:
    assert set(REQUIRED) <= set(catalog_ids())


def test_profile_facts_of_llama3() -> None:
    p = profile_model("meta-llama/Meta-Llama-3-8B")
    assert (p.family, p.task, p.num_layers, p.hidden_size) == ("decoder-only", "causal-lm", 32, 4096)
    assert (p.num_attention_heads, p.num_key_value_heads, p.ffn_size, p.vocab_size) == (32, 8, 14336, 128256)
    assert p.checkpoint_dtype == "bfloat16" and p.pretrained_in_bf16 and p.gated_mlp and not p.tied_embeddings


def test_t5_is_flagged_as_pretrained_in_bf16() -> None:
    p = profile_model("t5-small")
    assert p.family == "encoder-decoder" and p.task == "seq2seq-lm" and p.checkpoint_dtype == "float32"
    assert p.pretrained_in_bf16


def test_local_folder_and_file(tmp_path) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "architectures": ["GPT2LMHeadModel"]}
        )
    )
    by_folder = profile_model(str(folder))
    by_file = profile_model(str(folder / "config.json"))
    assert by_folder.source == by_file.source == "local"
    assert by_folder.num_parameters == by_file.num_parameters
    assert by_folder.num_layers == 2


def test_hf_cache_is_used(tmp_path, monkeypatch) -> None:
    snapshot = tmp_path / "models--acme--tiny-gpt" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (tmp_path / "models--acme--tiny-gpt" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-gpt" / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 3, "n_embd": 64, "n_head": 4}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    p = profile_model("acme/tiny-gpt")
    assert p.source == "cache" and p.num_layers == 3


def test_unknown_id_offline_fails_fast_with_a_hint() -> None:
    start = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as err:
        profile_model("acme/does-not-exist")
    assert time.perf_counter() - start < 1.0
    assert "acme/does-not-exist" in str(err.value) and "config.json" in str(err.value)


def test_malformed_and_foreign_configs(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(BadConfigError, match="not valid JSON"):
        profile_model(str(bad))
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"name": "my-app", "version": 3}))
    with pytest.raises(BadConfigError, match="model_type"):
        profile_model(str(foreign))
    with pytest.raises(ModelNotFoundError):
        profile_model(str(tmp_path / "missing" / "config.json"))


def test_task_must_fit_the_family() -> None:
    with pytest.raises(UsageError, match="seq2seq-lm"):
        profile_model("gpt2", "seq2seq-lm")
    assert profile_model("bert-large-uncased", "sequence-classification").num_parameters == 335_143_938


def test_a_pre_quantized_checkpoint_says_how_its_weights_are_stored(tmp_path) -> None:
    """config.json's quantization_config (transformers writes it for a model saved quantized): bitsandbytes 4-bit
    with its double quantization, GPTQ's bits; a checkpoint of plain weights has none; a malformed one is a config
    error."""
    base = json.loads((ROOT / "probes" / "configs" / "meta-llama--Llama-3.1-8B.json").read_text())

    def profiled(quantization):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**base, "quantization_config": quantization}))
        return profile_model(str(path)).quantization

    bnb = profiled(
        {
            "quant_method": "bitsandbytes",
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True,
        }
    )
    assert bnb.bitsandbytes_4bit and bnb.double_quant and bnb.label == "bitsandbytes 4-bit"
    eight = profiled({"quant_method": "bitsandbytes", "load_in_8bit": True})
    assert not eight.bitsandbytes_4bit and eight.bits == 8
    gptq = profiled({"quant_method": "GPTQ", "bits": 4, "group_size": 128})
    assert (gptq.method, gptq.bits, gptq.bitsandbytes_4bit) == ("gptq", 4, False)
    assert profile_model("meta-llama/Llama-3.1-8B").quantization is None
    with pytest.raises(BadConfigError, match="quantization_config"):
        profiled(["not", "an", "object"])


def test_a_peft_adapter_folder_names_its_base_model(tmp_path) -> None:
    """A folder PEFT saved (adapter_config.json, no config.json) is not a model: the not-found line says which base
    model and rank to pass instead; an unreadable adapter config leaves the plain message."""
    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.1-8B", "r": 32})
    )
    with pytest.raises(
        ModelNotFoundError,
        match=r"LoRA adapter over 'meta-llama/Llama-3.1-8B': pass --model "
        r"meta-llama/Llama-3.1-8B --method lora --lora-rank 32",
    ):
        profile_model(str(tmp_path))
    (tmp_path / "adapter_config.json").write_text("{not json")
    with pytest.raises(ModelNotFoundError, match=r"no config.json in '[^']*'$"):
        profile_model(str(tmp_path))


def test_matching_ids_find_the_text_anywhere_in_an_id() -> None:
    """Issue 45: the wizard's model completion matched only the start of an id ('llama' found nothing)."""
    from probes.model_ids import matching_ids

    assert "meta-llama/Llama-2-7b-hf" in matching_ids("llama") and matching_ids("gpt")[0] == "gpt2"
    assert matching_ids("70b") == ["meta-llama/Llama-2-70b-hf", "meta-llama/Llama-3.1-70B"]
    assert matching_ids("l27b")[0] == "meta-llama/Llama-2-7b-hf"  # letters in order, the most compact first
    assert matching_ids("") == [] and matching_ids("xyzzy") == []
