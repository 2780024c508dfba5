"""The human report of ``advisor recommend``: the plan card (default) and the full report (``--explain``), rendered
at 80 and 120 columns and compared with the text snapshots in ``tests/report_snapshots``. A change that means to
change them re-records them: ``python tests/app/test_report.py --record``."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from advisor.app.api import recommend
from advisor.app.report import CARD_LINES, print_recommendation

SNAPSHOTS = Path(__file__).resolve().parents[1] / "report_snapshots"
#: (name, model, options): catalog hardware only, so the rendering is the same on every machine.
CASES = [
    ("gpt2-a100", "gpt2", {"gpu": "a100-80gb"}),
    ("llama2-7b-a100x8", "meta-llama/Llama-2-7b-hf", {"gpu": "a100-80gb:8", "seq_len": 2048}),
    ("llama2-7b-rtx4090", "meta-llama/Llama-2-7b-hf", {"gpu": "rtx-4090"}),
    ("qwen2.5-7b-l4", "Qwen/Qwen2.5-7B", {"gpu": "l4", "seq_len": 4096, "global_batch_size": 32}),
]
WIDTHS = (80, 120)


def render(model: str, options: dict, width: int, explain: bool) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, record=True)
    print_recommendation(recommend(model, **options), console, explain=explain)
    return console.export_text()


def _name(case: str, width: int, explain: bool) -> str:
    return f"{case}-{'explain' if explain else 'card'}-{width}.txt"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case,model,options", CASES)
def test_card_fits_the_terminal(case: str, model: str, options: dict, width: int) -> None:
    text = render(model, options, width, explain=False)
    lines = text.splitlines()
    assert len(lines) <= CARD_LINES and max(map(len, lines)) <= width, text
    assert text == (SNAPSHOTS / _name(case, width, False)).read_text(encoding="utf-8")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case,model,options", CASES[:2])
def test_explain_has_every_reason_and_source_once(case: str, model: str, options: dict, width: int) -> None:
    rec = recommend(model, **options)
    text = render(model, options, width, explain=True)
    flat = "".join(text.replace("│", " ").split())  # long URLs and rule ids wrap at 80 columns
    urls = {s.url for d in rec.settings.values() for s in d.sources}
    for url in urls:  # numbered references, each printed once
        assert flat.count(f"<{url}>") == 1, url
    wide = render(model, options, 1000, explain=True)  # a table cell's lines interleave with its row's others
    for d in rec.settings.values():
        for rule in d.rule_ids:
            assert rule in wide, rule
        for alt in d.alternatives:  # every alternative that lost, none cut
            assert alt.reason in wide, alt.reason
    assert f"[{len(urls)}] " in text and f"[{len(urls) + 1}] " not in text
    assert text == (SNAPSHOTS / _name(case, width, True)).read_text(encoding="utf-8")


def test_rows_without_a_decision_fold_into_one_row() -> None:
    """On one GPU every parallelism but none is refused by a rule: no row of its own, folded into 'also'."""
    text = render("gpt2", {"gpu": "a100-80gb"}, 120, explain=False)
    assert "parallelism=none" in text and "\nparallelism " not in text
    assert "\nprecision " in text  # bf16 beat fp16 and fp32 on figures: a row of its own


def test_a_cpu_plan_card_says_so_first_with_what_a_gpu_would_give() -> None:
    """Issue 45: on a machine without a GPU the first answer is a CPU plan at minutes a step: the card's second line
    says so, with one catalog GPU's figure and the command that ranks them all; the card still fits 80 x 24."""
    from probes.hardware import HardwareProfile, HostInfo

    cpu = HardwareProfile(source="none", host=HostInfo(cpu_cores=2, ram_bytes=24 * 2**30, cpu_flags=["avx2"]))
    console = Console(width=80, file=io.StringIO(), color_system=None, record=True)
    print_recommendation(recommend("gpt2", hardware=cpu), console)
    lines = console.export_text().splitlines()
    assert lines[0].endswith("on the CPU, seq-len 1024 × batch 64") and lines[1].startswith("no GPU here: ")
    head = " ".join(lines[1:3])
    assert "s a step on this CPU" in head and "on --gpu a100-80gb: " in head and "advisor compare --model gpt2" in head
    assert len(lines) <= CARD_LINES and max(map(len, lines)) <= 80


@pytest.mark.slow
def test_the_gain_row_names_each_package_with_what_it_brings() -> None:
    """A package missing where the plan trains that would make it faster: one row, the method when it changes;
    --explain gives the install command and the whole plan."""
    options = {"gpu": "l4", "seq_len": 4096, "global_batch_size": 32}
    # LoRA needs checkpointing on the 24 GB L4; QLoRA with Liger's fused loss fits without it
    card = render("Qwen/Qwen2.5-7B", options, 80, explain=False)
    assert "\ngain   install liger-kernel (qlora: " in card
    explained = render("Qwen/Qwen2.5-7B", options, 1000, explain=True)
    assert "install liger-kernel (pip install liger-kernel): loss_kernel=liger, qlora: " in explained
    assert "\ngain " not in render("gpt2", {"gpu": "a100-80gb"}, 120, explain=False)


if __name__ == "__main__" and "--record" in sys.argv:
    SNAPSHOTS.mkdir(exist_ok=True)
    for case, model, options in CASES:
        for width in WIDTHS:
            for explain in (False, True):
                if explain and (case, model, options) not in CASES[:2]:
                    continue
                (SNAPSHOTS / _name(case, width, explain)).write_text(
                    render(model, options, width, explain), encoding="utf-8"
                )
    print(f"recorded {len(list(SNAPSHOTS.iterdir()))} snapshots in {SNAPSHOTS}")


def test_the_memory_table_gives_an_offload_s_host_ram_its_own_verdict() -> None:
    """An optimizer offload that fits the GPU but not a 16 GB host: the device row says it fits, the host rows say
    what the offload takes and that it does not fit; without --host-memory, the catalog's typical host's RAM."""
    from advisor.app.api import estimate
    from advisor.app.report import memory_table

    def text(**kw) -> str:
        est = estimate(
            "meta-llama/Llama-2-7b-hf", gpu="rtx-4090", gradient_checkpointing=True, **{"offload": "optimizer", **kw}
        )
        console = Console(width=120, file=io.StringIO(), color_system=None, record=True)
        console.print(memory_table(est.memory))
        return console.export_text()

    small = text(host_memory_bytes=16 * 10**9)
    rows = {line.split("│")[1].strip(): line for line in small.splitlines() if line.count("│") >= 3}
    assert "fits" in rows["usable of capacity"] and "does not fit" not in rows["usable of capacity"]
    assert "GiB" in rows["host RAM (offload)"] and "does not fit" in rows["usable host RAM"]
    # without --host-memory: the catalog's typical server for an RTX 4090 (64 GiB), never unchecked
    assumed = {line.split("│")[1].strip(): line for line in text().splitlines() if line.count("│") >= 3}
    assert "of 64.00 GiB" in assumed["usable host RAM"]
    assert "host RAM" not in text(offload="none", parallelism="none")
