"""The table of plan dimensions (advisor/core/dimensions.py): one row per setting, every list of settings read
from it, and what each consumer of a plan does with its values."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from advisor.core import dimensions as d
from advisor.core.dimensions import DIMENSIONS, Consumer, Role, Setting, refusal, swapped
from advisor.core.plan import Plan, Workload
from conftest import cuda_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _plan(**update) -> Plan:
    return cuda_plan(**{**update})


def test_every_plan_field_has_exactly_one_row() -> None:
    names = [row.name for row in DIMENSIONS]
    assert len(names) == len(set(names)), "a setting has two rows"
    assert sorted(d.plan_fields()) == sorted(Plan.model_fields), "Plan's fields and the table's plan rows differ"


def test_setting_is_the_table() -> None:
    assert [s.value for s in Setting] == [row.name for row in DIMENSIONS if row.setting]
    assert set(Setting) - set(Plan.model_fields) == {r.name for r in DIMENSIONS if r.role is Role.RULE}


def test_the_stack_rows_are_the_workloads_pins() -> None:
    assert set(d.STACK_SETTINGS) <= set(Workload.model_fields)
    assert Workload.model_fields.keys() >= set(d.STACK_SETTINGS)


def test_flags_carry_their_bounds() -> None:
    from advisor.app.options import PlanOptions

    assert list(PlanOptions.model_fields) == list(d.PLAN_FLAGS)
    for row in DIMENSIONS:
        if row.flag and row.metavar:
            assert PlanOptions.model_fields[row.name].json_schema_extra["metavar"] == row.metavar


@pytest.mark.parametrize("consumer", list(Consumer))
def test_a_default_plan_runs_everywhere(consumer: Consumer) -> None:
    assert refusal(consumer, _plan()) is None


@pytest.mark.parametrize(
    "update, consumer, words",
    [
        ({"tensor_parallel": 2, "num_gpus": 2}, Consumer.EMIT, "tensor parallel 2 x pipeline parallel 1"),
        ({"expert_parallel": 8, "num_gpus": 8, "parallelism": "ddp"}, Consumer.EMIT, "expert-model-parallel-size 8"),
        ({"framework": "litgpt"}, Consumer.EMIT, "litgpt's own code"),
        ({"fp8": True}, Consumer.TRIAL, "--no-fp8"),
        ({"loss_kernel": "chunked"}, Consumer.TRIAL, "chunked cross-entropy"),
        ({"optimizer_in_backward": True}, Consumer.TRIAL, "optimizer step in backward"),
        ({"gradient_checkpointing": True, "checkpointing": "selective-op"}, Consumer.TRIAL, "not selective-op"),
        ({"torch_compile": True}, Consumer.SIMULATE, "not compiled"),
        ({"activation_offloading": True}, Consumer.SIMULATE, "activation offloading"),
        ({"optimizer": "adamw-8bit"}, Consumer.SIMULATE, "cannot run adamw-8bit"),
        ({"framework": "litgpt"}, Consumer.SIMULATE, "litgpt_simulated.py"),
    ],
)
def test_a_refusal_names_the_setting_and_its_value(update, consumer, words) -> None:
    reason = refusal(consumer, _plan(**update))
    assert reason is not None and words in reason and "\n" not in reason


def test_a_value_a_consumer_runs_is_not_refused() -> None:
    assert refusal(Consumer.TRIAL, _plan(loss_kernel="liger")) is None  # Liger's fused loss runs in a trial
    assert refusal(Consumer.TRIAL, _plan(checkpointing="selective-op")) is None  # no checkpointing: nothing to run
    assert refusal(Consumer.EMIT, _plan(fp8=True)) is None


def test_trials_swap_what_they_run_in_its_place() -> None:
    plan, notes = swapped(Consumer.TRIAL, _plan(parallelism="zero-1", num_gpus=2))  # crashed before (StopIteration)
    assert plan.parallelism == "zero-2" and notes == [
        "zero-1 has no torch.distributed counterpart here: the trial runs zero-2 (FSDP SHARD_GRAD_OP)"
    ]
    assert swapped(Consumer.TRIAL, _plan(parallelism="dp", num_gpus=2))[1] == [
        "dp has no torch.distributed counterpart here: the trial runs ddp (DDP)"
    ]
    assert swapped(Consumer.TRIAL, _plan(parallelism="ddp", num_gpus=2))[1] == []


def _assigned_collections(path: Path) -> list[str]:
    """Tuple, list or set literals of two or more plan setting names, anywhere in the module (a dict is a plan update
    or a table by setting, not a list of settings)."""
    names = {row.name for row in DIMENSIONS}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            continue
        spelled = [e for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
        members = [e for e in node.elts if isinstance(e, ast.Attribute) and getattr(e.value, "id", None) == "Setting"]
        if len(spelled) + len(members) >= 2:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)[:80]}")
    return found


def test_no_module_outside_core_lists_settings() -> None:
    """Every collection of settings is read from the table: no module outside advisor/core spells one."""
    offenders = [
        hit
        for pkg in ("probes", "rules", "advisor", "tui")
        for path in sorted((ROOT / pkg).rglob("*.py"))
        if "core" not in path.relative_to(ROOT).parts
        for hit in _assigned_collections(path)
    ]
    assert not offenders, "\n".join(offenders)


def test_a_plan_the_hand_off_swaps_is_labelled_estimate_only() -> None:
    from advisor.engine.recommendation import estimate_only

    from advisor.engine.recommendation import hand_off

    assert estimate_only(_plan()) is None and hand_off(_plan()) is None
    # activation offloading runs in TRL's SFTConfig (--emit trl): not an estimate only, and the plan says who runs it
    assert estimate_only(_plan(activation_offloading=True)) is None
    assert hand_off(_plan(activation_offloading=True)) == (
        "--emit trl runs activation_offloading as priced; the Trainer's files do not"
    )
    assert "torchtune's optimizer_in_bwd" in estimate_only(_plan(optimizer_in_backward=True))  # no target runs it
    assert "expert-model-parallel-size 8" in estimate_only(_plan(expert_parallel=8, num_gpus=8, parallelism="ddp"))


def test_a_search_for_a_trial_leaves_out_what_a_trial_cannot_run() -> None:
    from advisor.engine.legality import capability_forbids

    forbids = {
        (e.setting, e.value)
        for e in capability_forbids(
            Consumer.TRIAL,
            {
                "tensor_parallel": [1, 2, 4],
                "loss_kernel": ["liger", "chunked", "standard"],
                "fp8": [True, False],
                "optimizer_in_backward": [False, True],
                "precision": ["bf16", "fp32"],
            },
        )
    }
    assert forbids == {
        ("tensor_parallel", 2),
        ("tensor_parallel", 4),
        ("loss_kernel", "chunked"),
        ("fp8", True),
        ("optimizer_in_backward", True),
    }


#: Catalog questions whose plans reach for what the hand-off or a trial cannot run: tensor / expert parallelism,
#: activation offloading, the step in backward, 4-bit adapters, several nodes.
GRID = [
    ("gpt2", {"gpu": "a100-80gb"}),
    ("meta-llama/Llama-3.1-8B", {"gpu": "rtx-4090", "seq_len": 2048, "global_batch_size": 16}),
    ("meta-llama/Llama-3.1-70B", {"gpu": "rtx-a6000", "seq_len": 2048, "global_batch_size": 16}),
    ("meta-llama/Llama-2-7b-hf", {"gpu": "a100-40gb:2", "nodes": 4}),
    ("mistralai/Mixtral-8x7B-v0.1", {"gpu": "a100-80gb:8"}),
    ("Qwen/Qwen3-14B", {"gpu": "l40s:4", "seq_len": 8192, "global_batch_size": 32}),
]


@pytest.mark.parametrize("model, options", GRID, ids=[f"{m}-{o['gpu']}" for m, o in GRID])
def test_the_recommended_plan_runs_as_emitted_or_says_so(model, options) -> None:
    from advisor.app.api import make_facts, recommend
    from advisor.app.emit import render
    from advisor.engine.planner import search

    rec = recommend(model, **options)
    if rec.estimate_only is None:  # every swap left is one TRL's SFTConfig runs (--emit all writes it)
        assert refusal(Consumer.EMIT, rec.plan) is None and swapped(Consumer.EMIT, rec.plan, "trl")[1] == []
        assert render(rec, ["all"])  # the files are written
        assert (rec.hand_off is None) == (swapped(Consumer.EMIT, rec.plan)[1] == [])
    else:
        assert rec.estimate_only in (
            refusal(Consumer.EMIT, rec.plan) or "; ".join(swapped(Consumer.EMIT, rec.plan, "trl")[1])
        )
    trial = search(make_facts(model, **options), runs_on=Consumer.TRIAL).best
    assert trial is None or refusal(Consumer.TRIAL, trial.plan) is None  # validate's plan is one a trial runs


def test_the_architecture_page_shows_the_table() -> None:
    from advisor.core.dimensions import markdown

    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    shown = page.split("<!-- dimensions -->\n", 1)[1].split("<!-- /dimensions -->", 1)[0]
    assert shown == markdown(), "docs/ARCHITECTURE.md's table of dimensions is stale: paste dimensions.markdown()"
