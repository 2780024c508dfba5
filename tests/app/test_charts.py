"""Pictures in the terminal: the card's memory bar split by component with its key, and compare's bars."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from advisor.app.charts import PARTS, comparison_chart, memory_bar, memory_key, memory_parts
from advisor.app.compare import CompareRow, Comparison
from advisor.app.api import recommend
from rules import Workload


def plain(renderable, width: int = 80) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, record=True)
    console.print(renderable)
    return console.export_text()


@pytest.fixture(scope="module")
def memory():
    """bert-large on a V100 16 GB (the README's card): every part of the bar is large enough to draw."""
    return recommend("bert-large-uncased", gpu="v100-16gb", seq_len=512).memory


def test_the_parts_add_up_to_the_device_s_use(memory) -> None:
    parts = memory_parts(memory)
    c = memory.components
    assert [p[0] for p in parts] == [p[0] for p in PARTS]
    assert sum(p[3] for p in parts) == memory.device_bytes
    assert parts[0][3] == c.weights_bytes and parts[3][3] == c.activations_bytes
    assert (
        parts[4][3]
        == memory.device_bytes - c.weights_bytes - c.gradients_bytes - c.optimizer_states_bytes - c.activations_bytes
    )  # temporaries, the CUDA context and the allocator's reserve


def test_each_part_starts_with_its_letter_and_takes_its_share(memory) -> None:
    cells = 67
    bar, shown = memory_bar(memory, cells)
    text = bar.plain
    assert len(text) == cells and [p[0] for p in shown] == list("WGOA+")
    filled = text.rstrip("░")
    assert len(filled) == round(cells * memory.device_bytes / memory.capacity_bytes)
    segments = [text[text.index(p[0]) :] for p in shown]
    for part, segment, after in zip(shown, segments, [*segments[1:], text[len(filled) :]]):
        width = len(segment) - len(after)  # from its letter to the next part's
        assert abs(width - cells * part[3] / memory.capacity_bytes) <= 1, (part, width)
    styles = {str(span.style) for span in bar.spans}
    assert all(any(colour in style for style in styles) for _, _, colour, _ in PARTS)


def test_the_key_names_every_letter_drawn_in_words(memory) -> None:
    _, shown = memory_bar(memory, 67)
    narrow, wide = memory_key(shown, 80).plain, memory_key(shown, 200).plain
    assert narrow.strip() == "W weights · G gradients · O optimizer states · A activations · + other"
    assert wide.strip().startswith(f"W weights {memory.components.weights_bytes / 2**30:,.2f} · G gradients ")
    assert wide.rstrip().endswith(" GiB") and len(narrow.rstrip()) <= 80


def test_a_plan_over_the_capacity_fills_the_bar_with_its_parts(memory) -> None:
    over = memory.model_copy(update={"device_bytes": 2 * memory.capacity_bytes})
    bar, shown = memory_bar(over, 40)
    assert "░" not in bar.plain and len(bar.plain) == 40 and shown[-1][0] == "+"


def _row(gpu: str, time_s: float | None, usd: float | None = None) -> CompareRow:
    return CompareRow(
        gpu=gpu,
        gpu_name=gpu,
        num_gpus=1,
        fits=time_s is not None,
        device_bytes=1,
        usable_bytes=2,
        time_s=time_s,
        cost_per_billion_tokens_usd=usd,
    )


def test_compare_draws_time_and_cost_as_bars_in_the_table_s_order() -> None:
    c = Comparison(
        model="m",
        workload=Workload(seq_len=1024, global_batch_size=64),
        tokens=10**9,
        sort="time",
        rows=[_row("h100-sxm", 3600.0, 40.0), _row("l4", 4 * 3600.0), _row("t4", None)],
    )
    lines = plain(comparison_chart(c, 80)).splitlines()
    assert lines[:2] == ["", "time to train on 1B tokens (shorter is faster)"]
    h100, l4, t4 = lines[2:5]
    assert h100.startswith("h100-sxm ") and h100.rstrip().endswith("1.0 h")
    assert l4.rstrip().endswith("4.0 h") and t4.split() == ["t4", "no", "plan", "fits"]
    longest = l4.count("█")
    assert longest == 80 - len("h100-sxm") - 14 and abs(h100.count("█") - longest / 4) <= 1
    assert lines[5:7] == ["", "US dollars per 1B tokens (shorter is cheaper)"]
    assert lines[7].rstrip().endswith(" 40") and lines[8].split() == ["l4", "no", "price"]
    no_prices = Comparison(**{**c.model_dump(), "rows": [_row("h100-sxm", 3600.0)]})
    assert "US dollars" not in plain(comparison_chart(no_prices, 80))
