"""The JSON contract: `advisor schema` equals the committed copy, and a changed schema needs a new version."""

from __future__ import annotations

import hashlib
import json

from advisor.engine.schema import SCHEMA_VERSION
from cli_runner import ROOT, advisor

COPY = ROOT / "schema" / "advisor.schema.json"
VERSIONS = ROOT / "schema" / "versions.json"
MODELS = {"Recommendation", "Estimate", "ValidationReport", "HardwareProfile", "ModelProfile", "Comparison"}


def _digest(schemas: dict) -> str:
    return hashlib.sha256(json.dumps(schemas, sort_keys=True).encode()).hexdigest()


def test_schema_command_matches_the_committed_copy() -> None:
    res = advisor("schema")
    assert res.returncode == 0, res.stderr
    printed = json.loads(res.stdout)
    assert set(printed["schemas"]) == MODELS
    assert printed == json.loads(COPY.read_text()), (
        "the JSON schema changed: if deliberate, run `advisor schema > schema/advisor.schema.json`, bump "
        "SCHEMA_VERSION in advisor/engine/recommendation.py and add the new hash to schema/versions.json"
    )


def test_each_schema_version_pins_one_schema() -> None:
    copy = json.loads(COPY.read_text())
    versions = json.loads(VERSIONS.read_text())
    assert copy["schema_version"] == SCHEMA_VERSION
    major, minor = SCHEMA_VERSION.split(".")
    assert major.isdigit() and minor.isdigit()
    assert versions.get(SCHEMA_VERSION) == _digest(copy["schemas"]), (
        f"the schema differs from the one version {SCHEMA_VERSION} was released with: bump SCHEMA_VERSION"
    )
    assert len(set(versions.values())) == len(versions)  # no two versions share a schema


def test_every_field_is_described() -> None:
    """Descriptions come from the models' docstrings (or Field descriptions), units in the text or name."""
    copy = json.loads(COPY.read_text())
    missing = []
    for top, schema in copy["schemas"].items():
        for name, definition in [(top, schema), *schema.get("$defs", {}).items()]:
            missing += [
                f"{name}.{field}"
                for field, prop in definition.get("properties", {}).items()
                if not prop.get("description")
            ]
    assert not missing, missing


def _numeric(prop: dict) -> bool:
    types = [prop.get("type")] + [p.get("type") for p in prop.get("anyOf", [])]
    return any(t in ("integer", "number") for t in types)


def test_byte_and_second_fields_carry_their_unit() -> None:
    """Stable machine output: a number measured in bytes is named *_bytes, one in seconds *_s."""
    copy = json.loads(COPY.read_text())
    offenders = []
    for schema in copy["schemas"].values():
        for name, definition in [("", schema), *schema.get("$defs", {}).items()]:
            for field, prop in definition.get("properties", {}).items():
                if not _numeric(prop):
                    continue
                text = prop.get("description", "").lower().rstrip(".)")
                if text.endswith("bytes") and not field.endswith("bytes"):
                    offenders.append(f"{name}.{field}")
                if text.endswith("seconds") and not field.endswith("_s"):
                    offenders.append(f"{name}.{field}")
    assert not offenders, offenders
