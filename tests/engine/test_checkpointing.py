"""Selective activation checkpointing (torchtitan's op- and layer-level policies): what each keeps and recomputes,
by hand for Llama-3.1-8B, and that a plan asking for it outside checkpointing, a trial or a simulation is one line."""

from __future__ import annotations

import pytest

from advisor.app.api import estimate
from advisor.engine.checkpointing import recompute_shares, selective_kept_bytes
from advisor.core.errors import UsageError
from probes.model import profile_model
from rules import Plan
from cli_runner import advisor
from conftest import cuda_plan  # noqa: E402

LLAMA = "meta-llama/Llama-3.1-8B"


def _est(**kw):
    base = dict(gpu="h100-sxm:8", precision="bf16", parallelism="fsdp-full-shard", micro_batch_size=2, seq_len=8192)
    return estimate(LLAMA, **{**base, **kw})


def _plan(**kw) -> Plan:
    return cuda_plan(**{"gradient_checkpointing": True, "micro_batch_size": 2, **kw})


def test_op_level_keeps_attention_and_every_other_matmul_by_hand() -> None:
    model = profile_model(LLAMA)  # h 4096, q 4096, k / v 1024, MLP 14336
    # kept: q (4096), v (1024), gate (14336), down (4096) and attention's output (4096), 2 B each, 2 x 8192 tokens
    assert selective_kept_bytes(model, _plan(checkpointing="selective-op"), 8192, 2) == 2 * 2 * 8192 * 27648
    # recomputed: k, o and up of the seven matmuls' FLOPs (in units of 4096: 4096, 1024, 1024, 4096, 3 x 14336)
    linear, attention = recompute_shares(model, _plan(checkpointing="selective-op"))
    assert linear == pytest.approx((1024 + 4096 + 14336) / 53248) and attention == 0
    assert recompute_shares(model, _plan()) == (1.0, 1.0)
    assert recompute_shares(model, _plan(checkpointing="selective-layer")) == (0.5, 0.5)  # 16 of 32 blocks
    assert recompute_shares(model, _plan(gradient_checkpointing=False)) == (0.0, 0.0)


def test_selective_keeps_more_than_full_and_less_than_none_and_recomputes_less() -> None:
    none = _est()
    full, op, layer = (
        _est(gradient_checkpointing=True, checkpointing=c) for c in ("full", "selective-op", "selective-layer")
    )
    act = [e.memory.components.activations_bytes for e in (full, op, layer, none)]
    assert act == sorted(act) and len(set(act)) == 4
    # full recomputes every block's forward; op-level a third of its matmuls and no attention
    assert none.speed.step_time_s < op.speed.step_time_s < layer.speed.step_time_s < full.speed.step_time_s
    assert op.plan.describe().count("selective-op checkpointing") == 1


def test_selective_without_checkpointing_is_one_usage_line() -> None:
    with pytest.raises(UsageError, match="needs --gradient-checkpointing"):
        _est(checkpointing="selective-op")
    res = advisor("estimate", "--model", LLAMA, "--gpu", "h100-sxm", "--checkpointing", "selective-layer")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "memory.selective-checkpointing" in res.stderr


def test_trials_and_simulation_run_full_checkpointing_only(tmp_path) -> None:
    res = advisor(
        "estimate",
        "--model",
        "gpt2",
        "--gpu",
        "a100-80gb",
        "--gradient-checkpointing",
        "--checkpointing",
        "selective-op",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    (tmp_path / "plan.json").write_text(res.stdout)
    res = advisor("validate", "--model", "gpt2", "--plan", str(tmp_path / "plan.json"), "--steps", "1")
    assert res.returncode == 2 and "--checkpointing full" in res.stderr, res.stderr
    res = advisor(
        "estimate",
        "--model",
        "gpt2",
        "--gpu",
        "a100-80gb",
        "--gradient-checkpointing",
        "--checkpointing",
        "selective-op",
        "--simulate",
    )
    assert res.returncode == 2 and "full activation checkpointing" in res.stderr, res.stderr
