"""``advisor compare``: the best plan per GPU, ranked by time or by cost, and its refusals."""

from __future__ import annotations

import json
import time

import pytest

from advisor.app.api import recommend
from advisor.app.compare import Comparison, compare, count, duration
from advisor.core.errors import ExitCode, UsageError
from probes.gpu_catalog import catalog
from cli_runner import advisor

LLAMA = "meta-llama/Llama-2-7b-hf"


@pytest.mark.slow
def test_the_catalog_ranked_by_time_with_recommend_s_plans() -> None:
    start = time.perf_counter()
    c = compare(LLAMA, tokens=10**9)
    elapsed = time.perf_counter() - start
    assert [r.gpu for r in c.rows] and {r.gpu for r in c.rows} == set(catalog())
    for method in {r.plan.method for r in c.rows if r.fits}:  # ranked per method: like with like
        times = [r.time_s for r in c.rows if r.fits and r.plan.method == method]
        assert times == sorted(times)
    assert elapsed < 30, elapsed  # one search per GPU, no explanation: about 1 s here
    for row in c.rows[:3]:  # the same plan as recommend's
        assert recommend(LLAMA, gpu=row.gpu).plan == row.plan
        assert row.time_s == pytest.approx(10**9 / row.tokens_per_s)


def test_cost_per_billion_tokens_and_sorting_by_cost() -> None:
    prices = {"h100-sxm": 3.0, "a100-80gb": 1.5, "t4": 0.3}
    c = compare(
        LLAMA, gpus=["h100-sxm", "a100-80gb:2", "t4", "l4"], prices=prices, sort="cost", tokens=5 * 10**8, method="lora"
    )
    rows = {r.gpu: r for r in c.rows}
    a100 = rows["a100-80gb:2"]
    assert a100.num_gpus == 2
    assert a100.cost_per_billion_tokens_usd == pytest.approx(1.5 * 2 * 10**9 / a100.tokens_per_s / 3600)
    assert rows["l4"].cost_per_billion_tokens_usd is None and c.rows[-1].gpu == "l4"  # unpriced last
    costs = [r.cost_per_billion_tokens_usd for r in c.rows[:3]]
    assert costs == sorted(costs)
    assert c.tokens == 5 * 10**8


def test_a_gpu_where_nothing_fits_comes_last() -> None:
    c = compare("meta-llama/Llama-3.1-8B", gpus=["t4", "h100-sxm"], seq_len=16384)
    assert [r.fits for r in c.rows] == [True, False] and c.rows[1].plan is None
    assert c.rows[1].device_bytes > c.rows[1].usable_bytes


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"sort": "cost"}, "needs prices"),
        ({"tokens": 0}, "from 1 to"),
        ({"tokens": 10**30}, "from 1 to 1e\\+15"),
        ({"prices": {"h100-sxm": 3.0}}, "h100-sxm: not among the compared GPUs"),
        ({"prices": {"t4": float("nan")}}, "t4=nan: expected a finite number"),
    ],
)
def test_refusals(kwargs: dict, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        compare("gpt2", gpus=["t4"], **kwargs)


def test_cli_json_and_table() -> None:
    out = advisor(
        "compare",
        "--model",
        "gpt2",
        "--gpu",
        "t4",
        "--gpu",
        "a100-80gb:2",
        "--tokens",
        "2e9",
        "--price-per-hour",
        "t4=0.35",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    c = Comparison.model_validate(json.loads(out.stdout))
    assert c.tokens == 2 * 10**9 and [r.gpu for r in c.rows] == ["a100-80gb:2", "t4"]
    assert out.stderr == ""  # no progress line when stderr is not a terminal
    table = advisor("compare", "--model", "gpt2", "--gpu", "t4", "--price-per-hour", "t4=0.35")
    assert table.returncode == 0 and "1B tokens" in table.stdout and "$ per 1B" in table.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--price-per-hour", "t4"),
        ("--price-per-hour", "nope=1"),
        ("--price-per-hour", "t4=-1"),
        ("--price-per-hour", "t4=nan"),
        ("--price-per-hour", "t4=1e400"),
        ("--tokens", "lots"),
        ("--tokens", "1e30"),
        ("--gpu", "nope"),
        ("--gpu", "t4", "--price-per-hour", "l4=0.8"),
        ("--gpu", "t4", "--price-per-hour", "t4=1", "--price-per-hour", "T4=2"),
    ],
)
def test_cli_bad_input_is_one_line(args: tuple[str, ...]) -> None:
    out = advisor("compare", "--model", "gpt2", *args)
    assert out.returncode == ExitCode.USAGE and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr


def test_cli_takes_recommend_s_workload_flags() -> None:
    """--mean-sample-len, as recommend takes it: 256-token samples in 1024-token rows, unpacked (no FlashAttention
    on a catalog GPU), padded to each micro-batch's longest: fewer useful tokens/s than full rows, more than a
    quarter of them (the padding reaches the row's end only in the longest batches)."""

    def tokens_per_s(*args: str) -> float:
        out = advisor("compare", "--model", "gpt2", "--gpu", "a100-80gb", *args, "--json")
        assert out.returncode == 0, out.stderr
        return Comparison.model_validate(json.loads(out.stdout)).rows[0].tokens_per_s

    assert 0.25 < tokens_per_s("--mean-sample-len", "256") / tokens_per_s() < 0.5


def test_units_read_at_a_glance() -> None:
    assert [duration(s) for s in (45, 750, 3 * 3600, 5 * 86400, 800 * 86400)] == [
        "45 s",
        "12.5 min",
        "3.0 h",
        "5.0 d",
        "2.2 y",
    ]
    assert [count(n) for n in (15 * 10**12, 10**9, 5 * 10**8, 12345)] == ["15T", "1B", "500M", "12,345"]


def test_a_gpu_given_twice_is_one_row() -> None:
    """t4, T4 and t4:1 are one GPU: one row (the first spelling), not three identical ones; t4:2 is another."""
    c = compare("gpt2", gpus=["t4", "T4", "t4:1", "t4:2"])
    assert sorted(r.gpu for r in c.rows) == ["t4", "t4:2"]


def test_method_auto_ranks_each_method_apart() -> None:
    """Llama-3.1-8B under --method auto: QLoRA on a 24 GB card and LoRA on the larger ones. A QLoRA row is not a
    cheaper way to the same training as a LoRA row, so the rows come grouped by method (the groups in the order of
    their best row, each ranked by cost) and the table has a method column."""
    c = compare(
        "meta-llama/Llama-3.1-8B",
        gpus=["h100-sxm", "l40s", "a100-80gb", "rtx-4090"],
        sort="cost",
        prices={"h100-sxm": 3.0, "l40s": 1.0, "a100-80gb": 1.8, "rtx-4090": 0.4},
    )
    methods = [r.plan.method for r in c.rows]
    assert len(set(methods)) > 1
    assert methods == sorted(methods, key=methods.index)  # each method's rows together
    for method in set(methods):
        costs = [r.cost_per_billion_tokens_usd for r in c.rows if r.plan.method == method]
        assert costs == sorted(costs)
    table = advisor("compare", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm", "--gpu", "rtx-4090")
    assert "ranked per method" in table.stdout and " method " in table.stdout
