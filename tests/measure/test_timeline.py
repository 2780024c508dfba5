"""``advisor estimate --simulate --timeline``: the simulated step's allocations by kind, and their picture."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from advisor.measure.timeline import KINDS, MemoryTimeline
from cli_runner import ROOT, run_cli

SVG = "{http://www.w3.org/2000/svg}"
TINY = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_layer": 2,
    "n_embd": 128,
    "n_head": 4,
    "n_positions": 256,
    "vocab_size": 1000,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}


def test_kinds_follow_the_phases_and_the_labels() -> None:
    """Torch-free: a forward allocation freed within its pass is a temporary, one alive at its end an activation;
    a labelled one keeps its label for its whole life; the columns keep the peak exactly, the build left out."""
    t = MemoryTimeline()
    t.allocate(100, "aten.empty.memory_format", "build")  # a weight
    scratch = t.allocate(1000, "aten.randn.default", "build")  # initialisation's scratch: above any later total
    t.free(scratch, "build")
    saved = t.allocate(30, "aten.mm.default", "forward")
    temp = t.allocate(50, "aten.gelu.default", "forward")
    t.free(temp, "forward")
    grad = t.allocate(100, "aten.mm.default", "backward")
    t.label(grad, "gradients")
    t.free(saved, "backward")
    state = t.allocate(200, "aten.zeros_like.default", "optimizer")
    t.label(state, "optimizer_states")
    assert t.kinds == ["weights", "temporaries", "activations", "temporaries", "gradients", "optimizer_states"]
    columns, peak = t.columns(most=3)
    assert len(columns) == 3 and peak.total == 400 and peak.op == "aten.zeros_like.default"
    assert peak.by_kind == {
        "weights": 100,
        "gradients": 100,
        "optimizer_states": 200,
        "activations": 0,
        "temporaries": 0,
    }
    assert max(c.total for c in columns) == 1100  # the build's scratch is drawn, but is not the step's peak
    assert [phase for _, phase in t.marks] == ["build", "forward", "backward", "optimizer"]
    with pytest.raises(ValueError):
        t.columns(most=0)


@pytest.mark.parametrize(
    "name, code, words",
    [
        ("step.png", 2, "--timeline step.png: expected a file name ending in .svg or .html"),
        ("missing/step.svg", 7, "folder missing does not exist"),
    ],
)
def test_a_bad_target_is_one_line_before_any_simulation(tmp_path, name: str, code: int, words: str) -> None:
    got, out, err = run_cli(["estimate", "--model", "gpt2", "--gpu", "a100-80gb", "--timeline", name], cwd=tmp_path)
    assert (got, out) == (code, "") and err.count("\n") == 1 and words in err, err


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """The tiny GPT-2's estimate with its simulated step, fp32 AdamW on one A100 (one simulation for the module)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from advisor.app.api import estimate

    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY))
    return estimate(str(path), gpu="a100-80gb", seq_len=128, micro_batch_size=4, precision="fp32", simulate=True)


@pytest.mark.slow
def test_the_kinds_hold_what_they_name(simulated) -> None:
    """fp32 AdamW: 4 bytes a parameter of weights and of gradients, 8 of states (and its step counters); the step's
    peak is the simulation's."""
    timeline = simulated.simulated.timeline
    columns, peak = timeline.columns()
    P = simulated.model.num_parameters
    most = {kind: max(c.by_kind[kind] for c in columns) for kind in KINDS}
    assert most["weights"] == 4 * P and most["gradients"] == 4 * P
    assert 8 * P <= most["optimizer_states"] <= 8 * P + 4096
    assert most["activations"] > 0 and most["temporaries"] > 0
    assert peak.total == simulated.simulated.peak_bytes and peak.phase == simulated.simulated.peak_phase


@pytest.mark.slow
def test_the_svg_has_one_series_per_kind_and_the_simulated_peak(simulated, tmp_path) -> None:
    from advisor.app.timeline import write_timeline

    path = write_timeline(simulated, tmp_path / "step.svg")
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    series = [g.get("data-kind") for g in root.iter(f"{SVG}g") if g.get("data-kind")]
    assert series == list(KINDS)
    peak = next(g for g in root.iter(f"{SVG}g") if g.get("id") == "peak")
    assert int(peak.get("data-bytes")) == simulated.simulated.peak_bytes
    label = "".join(t.text for t in peak.iter(f"{SVG}text"))
    mib = simulated.simulated.peak_bytes / 2**20
    assert label.startswith(f"peak {mib:,.2f} MiB · aten.") and f"({simulated.simulated.peak_phase})" in label
    assert all(g.find(f"{SVG}path/{SVG}title") is not None for g in root.iter(f"{SVG}g") if g.get("data-kind"))


@pytest.mark.slow
def test_the_html_embeds_the_svg_with_a_legend_row_per_kind(simulated, tmp_path) -> None:
    from advisor.app.timeline import write_timeline

    root = ET.parse(write_timeline(simulated, tmp_path / "step.html")).getroot()  # well-formed: XHTML
    html = "{http://www.w3.org/1999/xhtml}"
    assert len(list(root.iter(f"{SVG}svg"))) == 1
    assert [row.get("data-kind") for row in root.iter(f"{html}tr") if row.get("data-kind")] == list(KINDS)


@pytest.mark.slow
def test_the_command_writes_the_picture_whole(tmp_path) -> None:
    """``--timeline`` implies ``--simulate``; an existing file is replaced, and the line on stderr names it."""
    pytest.importorskip("torch")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    (tmp_path / "step.svg").write_text("old")
    code, out, err = run_cli(
        [
            "estimate",
            "--model",
            str(config),
            "--gpu",
            "a100-80gb",
            "--seq-len",
            "64",
            "--timeline",
            "step.svg",
            "--json",
        ],
        cwd=tmp_path,
    )
    assert code == 0 and err == "advisor: wrote step.svg\n", err
    assert json.loads(out)["simulated"]["peak_bytes"] > 0
    assert ET.parse(tmp_path / "step.svg").getroot().tag == f"{SVG}svg"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "step.svg"]  # no temporary file left


@pytest.mark.slow
def test_the_readme_picture_is_what_the_command_draws(tmp_path) -> None:
    """docs/timeline-gpt2.svg (shown in the README) is the README command's file, byte for byte."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    command = [
        "estimate",
        "--model",
        "gpt2",
        "--gpu",
        "a100-80gb",
        "--seq-len",
        "128",
        "--micro-batch-size",
        "4",
        "--timeline",
        "step.svg",
    ]
    assert "$ advisor " + " ".join(command) in (ROOT / "README.md").read_text(encoding="utf-8")
    code, _out, err = run_cli(command, cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "step.svg").read_text(encoding="utf-8") == (ROOT / "docs" / "timeline-gpt2.svg").read_text(
        encoding="utf-8"
    ), f"draw it again: advisor {' '.join(command[:-1])} docs/timeline-gpt2.svg"
