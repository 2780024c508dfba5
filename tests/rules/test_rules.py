"""Every rule against its cases file (tests/rule_cases/<rule id>.yaml), and the registry's contract.

A case gives facts (hardware, model, workload built here, not live NVML), optionally a plan
(then the rule's ``check`` runs too; with ``phase: refuse`` only its ``refuse``; with ``phase: weigh`` the rule's
``weigh`` on the case's ``args``) and the expected
effects of that rule alone.
Run one rule's cases with ``pytest -k <rule id>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import facts as build_facts
from rules import REGISTRY, Plan
from rules.base import Rule, RuleDefinitionError, Source, register

CASES_DIR = Path(__file__).resolve().parents[1] / "rule_cases"


def _plan(f, overrides: dict) -> Plan:
    gpu = f.gpu
    base = dict(
        device="cuda" if gpu else "cpu",
        precision="bf16" if gpu and gpu.bf16 else "fp32",
        tf32=bool(gpu and gpu.tf32),
        optimizer="adamw",
        gradient_checkpointing=False,
        micro_batch_size=8,
        gradient_accumulation_steps=f.workload.global_batch_size // 8,
        parallelism="none" if f.hardware.num_gpus <= 1 else "ddp",
        num_gpus=f.hardware.num_gpus,
    )
    base.update(overrides)
    return Plan(**base)


def _load_cases():
    for path in sorted(CASES_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for case in data["cases"]:
            yield pytest.param(path.stem, case, id=f"{path.stem}: {case['name']}")


@pytest.mark.parametrize("rule_id, case", list(_load_cases()))
def test_rule_case(rule_id: str, case: dict) -> None:
    assert rule_id in REGISTRY, f"cases file for unknown rule {rule_id}"
    rule = REGISTRY[rule_id]
    spec = dict(case["facts"])
    hw = spec.pop("hardware")
    f = build_facts(hw, **spec)
    phase = case.get("phase", "check" if "plan" in case else "propose")
    effects = rule.propose(f) if phase == "propose" else []
    if phase == "check":
        effects += rule.check(f, _plan(f, case.get("plan", {})))
    if phase == "weigh":  # a rule that compares two priced plans (method.full-unless-quality-risk)
        effects = rule.weigh(**case["args"])
    if phase == "refuse":
        refused = rule.refuse(f, _plan(f, case.get("plan", {})))
        effects = [refused] if refused is not None else []
        assert all(e.kind == "forbid" and e.hard for e in effects)
    expect = case["expect"]
    assert bool(effects) == expect["fires"], [e.model_dump() for e in effects]
    for wanted in expect.get("effects", []):
        assert any(all(getattr(e, k) == v for k, v in wanted.items()) for e in effects), (
            f"no effect matches {wanted}; got {[e.model_dump() for e in effects]}"
        )
    for e in effects:
        assert e.rule_id == rule_id and e.reason
    for text in case.get("message_contains", []):  # words an effect's reason must say
        assert any(text in e.reason for e in effects), (text, [e.reason for e in effects])


def test_every_rule_has_cases_that_fire_and_not() -> None:
    for rule_id in REGISTRY:
        path = CASES_DIR / f"{rule_id}.yaml"
        assert path.exists(), f"{rule_id} has no cases file"
        fires = [c["expect"]["fires"] for c in yaml.safe_load(path.read_text())["cases"]]
        assert True in fires and False in fires, f"{rule_id} needs a case that fires and one that does not"


def test_every_rule_cites_a_public_source() -> None:
    for rule in REGISTRY.values():
        assert rule.sources and all(s.url.startswith("https://") for s in rule.sources), rule.id
        assert len(rule.rationale) > 40, rule.id


def test_registry_refuses_malformed_rules() -> None:
    with pytest.raises(RuleDefinitionError, match="duplicate"):

        @register
        class Duplicate(Rule):
            id = "precision.bf16-on-ampere"
            title = "dup"
            topic = "precision"
            sources = [Source(title="x", url="https://example.org")]
            rationale = "a duplicate id must be refused at import time"

    with pytest.raises(RuleDefinitionError, match="public URL"):

        @register
        class NoUrl(Rule):
            id = "precision.no-url"
            title = "no url"
            topic = "precision"
            sources = [Source(title="x", url="a book on my shelf")]
            rationale = "a source without a URL must be refused at import time"

    assert "precision.no-url" not in REGISTRY
