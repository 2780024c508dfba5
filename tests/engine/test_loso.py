"""benchmarks/loso.py's leave-one-source-out machinery (issue 43): a refit without a source is made without that
source's runs, and the source is scored at it; the bands come from the residuals per class. Synthetic runs, no
pricing: fast."""

from __future__ import annotations

import pytest

from advisor.engine import bands, speed
from advisor.engine.bands import Verdict, verdict_of
from benchmarks import loso
from benchmarks.published import Result
from conftest import hardware

GB = 10**9


def _run(source: str, share: float, ran: bool, i: int = 0) -> Result:
    """A run of ``source`` whose device memory is ``share`` of an 80 GB GPU, published as ran or out of memory."""
    return Result(
        id=f"{source}-{i}",
        source=source,
        model="m",
        gpu="g",
        fits_published=ran,
        device_bytes=int(share * 80 * GB),
        usable_bytes=72 * GB,
        capacity_bytes=80 * GB,
        verdict=verdict_of(int(share * 80 * GB), 72 * GB, 80 * GB).value,
    )


@pytest.fixture
def runs() -> list[Result]:
    """Source a: three runs that completed at 115 % of the priced capacity; b and c: out of memory at 112 / 108 %."""
    return [*(_run("a", 1.15, True, i) for i in range(3)), _run("b", 1.12, False), _run("c", 1.08, False)]


def test_a_refit_without_a_source_is_made_without_its_runs(runs) -> None:
    grid = {p: runs for p in loso.TIGHT.grid}
    everyone = loso.refit(grid, loso.fit_loss, lambda r: True, loso.TIGHT.shipped())
    without_a = loso.refit(grid, loso.fit_loss, lambda r: r.source != "a", loso.TIGHT.shipped())
    assert everyone == (1.15,)  # a's three completed runs outweigh b and c
    assert without_a == (1.05,)  # b and c alone: at most 1.08, the nearest to advisor's limit


def test_cross_validation_scores_each_source_at_the_refit_without_it(runs) -> None:
    cv = loso.cross_validate(runs, cases=[])
    refits = cv.refits[loso.TIGHT.label()]
    assert refits == {"a": (1.05,), "b": (1.15,), "c": (1.15,)}
    verdicts = {r.id: r.verdict for r in cv.loso}
    assert [verdicts[f"a-{i}"] for i in range(3)] == [Verdict.NO_FIT] * 3  # scored at 1.05: none agrees
    assert verdicts["b-0"] == verdicts["c-0"] == Verdict.TIGHT  # scored at 1.15: both disagree
    assert loso.figures(cv.loso)["three-state verdict agrees (ran: fits / tight)"] == "0 of 5"
    assert cv.alone[loso.TIGHT.label()]["a"] == (1.15,)


def test_constants_are_restored_after_a_grid_point() -> None:
    shipped = (speed.TENSOR16_TOP, speed.BANDWIDTH_SHARE)
    with loso.values(loso.SPEED, (0.7, 0.6)):
        assert (speed.TENSOR16_TOP, speed.BANDWIDTH_SHARE) == (0.7, 0.6)
    assert (speed.TENSOR16_TOP, speed.BANDWIDTH_SHARE) == shipped


def test_speed_loss_counts_runs_within_the_factor_first() -> None:
    def rated(ratio: float) -> Result:
        return Result(
            id="r",
            source="s",
            model="m",
            gpu="g",
            rate_unit="tokens/s/GPU",
            rate_published=100.0,
            rate_predicted=100.0 * ratio,
            per_gpu=True,
        )

    assert loso.speed_loss([rated(1.2), rated(1.2)]) < loso.speed_loss([rated(1.0), rated(1.3)])


def test_the_three_states() -> None:
    assert verdict_of(70 * GB, 72 * GB, 80 * GB) == Verdict.FITS
    assert verdict_of(80 * GB, 72 * GB, 80 * GB) == Verdict.TIGHT
    assert verdict_of(int(80 * GB * bands.TIGHT_LIMIT) + 1, 72 * GB, 80 * GB) == Verdict.NO_FIT
    assert verdict_of(70 * GB, 72 * GB, 80 * GB, on_host=False) == Verdict.NO_FIT


def test_bands_are_a_quantile_of_each_class_and_fall_back_to_coarser_ones() -> None:
    runs = [
        Result(id=f"r{i}", source="s", model="m", gpu="g", plan_class="lora/replicated/sm9", memory_error=e)
        for i, e in enumerate([0.01, -0.02, 0.03, -0.04, 0.05, -0.06, 0.07, -0.08])
    ]
    runs.append(
        Result(
            id="x",
            source="s",
            model="m",
            gpu="g",
            plan_class="full/weights/sm9",
            memory_error=0.5,
            why=[loso.MISREPORTED],
        )
    )
    table = loso.band_table(runs)["memory"]
    assert bands.MIN_RESIDUALS <= 8
    assert table["lora/replicated/sm9"] == {"band": 0.07, "n": 8}  # the 80 % quantile: the seventh of eight
    assert "full/weights/sm9" not in table and table["*/*/*"]["n"] == 8  # a misreported run gives no residual
    assert bands.coarser("qlora/weights/sm8") == ["qlora/weights/sm8", "qlora/weights/*", "qlora/*/*", "*/*/*"]


def test_estimates_carry_the_verdict_and_the_bands_of_their_class(monkeypatch) -> None:
    from advisor.app.api import estimate

    table = {
        "memory": {"lora/replicated/sm8": {"band": 0.04, "n": 27}, "*/*/*": {"band": 0.11, "n": 94}},
        "step_time": {"*/*/*": {"band": 0.13, "n": 47}},
    }
    monkeypatch.setattr(bands, "_bands", lambda: table)
    lora = estimate("gpt2", gpu="a100-80gb", method="lora")
    assert (lora.memory.verdict, lora.memory.band, lora.speed.step_time_band) == (Verdict.FITS, 0.04, 0.13)
    full = estimate("gpt2", gpu="h100-sxm")  # no class of its own: the coarsest
    assert (full.memory.band, full.speed.step_time_band) == (0.11, 0.13)
    assert estimate("gpt2", gpu="a100-80gb", micro_batch_size=512).memory.verdict == Verdict.NO_FIT
    assert estimate("gpt2", hardware=hardware("cpu")).memory.band is None  # no published run on the CPU


def test_a_speed_refit_without_a_source_ignores_its_rates() -> None:
    def rated(source: str, ratio: float, i: int = 0) -> Result:
        return Result(
            id=f"{source}{i}",
            source=source,
            model="m",
            gpu="g",
            rate_unit="tokens/s/GPU",
            rate_published=1.0,
            rate_predicted=ratio,
            per_gpu=True,
        )

    low, high = (0.7, 0.6), (0.9, 1.0)  # a's three runs are right at the first point, b's and c's at the second
    grid = {
        low: [*(rated("a", 1.0, i) for i in range(3)), rated("b", 1.4), rated("c", 1.4)],
        high: [*(rated("a", 0.5, i) for i in range(3)), rated("b", 1.0), rated("c", 1.0)],
    }
    shipped = (0.8, 0.8)
    assert loso.refit(grid, loso.speed_loss, lambda r: True, shipped) == low  # three within 1.25x against two
    assert loso.refit(grid, loso.speed_loss, lambda r: r.source != "a", shipped) == high
    assert loso.refit(grid, loso.speed_loss, lambda r: r.source != "b", shipped) == low
