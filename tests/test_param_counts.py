"""Closed-form parameter counts equal what transformers counts on the meta device."""

from __future__ import annotations

import json

import pytest

from probes.architectures import FAMILIES
from probes.vocabulary import Family, Task
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


CASES = [(m, t) for m in catalog_ids()
         for t in Family(FAMILIES[json.loads(_catalog_dir().joinpath(m.replace("/", "--") + ".json")
                                                   .read_text())["model_type"]]).tasks]


@pytest.mark.parametrize("model_id, task", CASES, ids=[f"{m}:{t}" for m, t in CASES])
def test_closed_form_equals_transformers_meta_count(model_id: str, task: str) -> None:
    assert profile_model(model_id, task).num_parameters == _meta_count(model_id, task)


def test_published_counts() -> None:
    assert profile_model("gpt2").num_parameters == 124_439_808  # tied embeddings counted once
    assert profile_model("meta-llama/Llama-2-7b-hf").num_parameters == 6_738_415_616
    assert profile_model("meta-llama/Meta-Llama-3-8B").num_parameters == 8_030_261_248


def test_meta_device_fallback_for_other_architectures(tmp_path) -> None:
    config = {"model_type": "gpt_neo", "architectures": ["GPTNeoForCausalLM"], "hidden_size": 64,
              "num_layers": 2, "num_heads": 4, "attention_types": [[["global", "local"], 1]],
              "vocab_size": 1000, "max_position_embeddings": 128}
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
