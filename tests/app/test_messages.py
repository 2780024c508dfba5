"""Messages that say what to do: the model-not-found message, the Hub's renamed ids, every flag's help."""

from __future__ import annotations

import argparse

import pytest

from advisor.app.cli import build_parser
from advisor.core.errors import ExitCode, ModelNotFoundError
from probes.model import catalog_ids, profile_model
from probes.model_ids import RENAMED_IDS, near_matches
from cli_runner import advisor


def test_not_found_names_the_sources_and_near_matches(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as err:
        profile_model("Qwen/Qwen2.5-0.5B")
    message = str(err.value)
    assert "the Hub: skipped (offline: HF_HUB_OFFLINE=1)" in message  # never "not on the Hub": it was not asked
    assert "the Hugging Face cache: not there" in message and "the shipped catalog: not there" in message
    assert "near matches: Qwen/Qwen2.5-3B, Qwen/Qwen2.5-7B" in message  # the shipped Qwen2.5 configs


def test_near_matches_from_the_catalog() -> None:
    assert near_matches("llama-2-7b")[0] == "meta-llama/Llama-2-7b-hf"
    assert near_matches("bert-base-cased")[0] == "bert-base-uncased"
    assert near_matches("xyzzy") == []


@pytest.mark.parametrize("renamed", sorted(RENAMED_IDS))
def test_the_hub_s_renamed_ids_are_the_shipped_configs(monkeypatch, renamed: str) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shipped = RENAMED_IDS[renamed]
    assert shipped in catalog_ids()
    a, b = profile_model(renamed), profile_model(shipped)
    assert a.num_parameters == b.num_parameters and a.source == "catalog"
    assert any("the Hub's id of the shipped" in note for note in a.notes)


def test_not_found_is_one_line_and_exit_3() -> None:
    out = advisor("recommend", "--model", "openai-community/gpt-2")
    assert out.returncode == ExitCode.MODEL_NOT_FOUND and len(out.stderr.splitlines()) == 1
    assert "near matches: gpt2" in out.stderr


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_every_flag_has_help_with_its_default(command: str) -> None:
    missing = []
    for action in _subparsers()[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        text = action.help or ""
        if not text or (not action.required and "default" not in text):
            missing.append("/".join(action.option_strings))
    assert not missing, f"advisor {command}: flags without help or default: {missing}"
