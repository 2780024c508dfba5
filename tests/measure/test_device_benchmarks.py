"""benchmarks/validate_device.py and benchmarks/refit_device.py: the grid a device runs, records that survive a
stopped run, and the constants the records imply (issue 13, item 4)."""

from __future__ import annotations

import json

import pytest

from benchmarks import refit_device, validate_device
from benchmarks.device_records import read_records, render
from benchmarks.validate_device import Row, grid, missing, packages_needed
from advisor.core.errors import ModelNotFoundError

GIB = 2**30


def test_implied_reserve_inverts_device_bytes() -> None:
    # 4 GiB of states held exactly, 4 GiB of transient tensors taking 6 GiB of reserve: 1.5
    assert refit_device.implied_reserve(10 * GIB, 8 * GIB, 4 * GIB, slack_bytes=0) == pytest.approx(1.5)
    assert refit_device.implied_reserve(10 * GIB + 128, 8 * GIB, 4 * GIB, slack_bytes=128) == pytest.approx(1.5)
    assert refit_device.implied_reserve(5 * GIB, 4 * GIB, 6 * GIB) is None  # nothing beside the states


def test_activation_factor_takes_the_other_bytes_as_predicted() -> None:
    # predicted 12 GiB of which 6 activations; measured 10: the activations were 4 GiB, 2/3 of the prediction
    assert refit_device.activation_factor(10 * GIB, 12 * GIB, 6 * GIB) == pytest.approx(2 / 3)
    assert refit_device.activation_factor(10 * GIB, 12 * GIB, 0) is None


def test_the_stack_grid_keeps_its_indices_and_skips_rows_whose_package_is_missing() -> None:
    assert packages_needed({"attention": "flash-attention-2", "method": "qlora"}) == ["flash_attn", "bitsandbytes"]
    assert packages_needed({"loss_kernel": "liger", "method": "lora"}) == ["liger_kernel", "peft"]
    assert packages_needed({"activation_offloading": True, "method": "lora"}) == ["peft", "trl"]
    rows = grid(gpu=True, stack=True)
    assert rows[:2] == validate_device.GPU_GRID and all(r.compare for r in rows[:2])
    assert rows[2:] == validate_device.STACK_GRID  # the same indices here (--list --gpu) as on a lent machine
    assert not any(r.compare for r in rows[2:])  # the stack rows run the plan alone: half the device time
    installed = {"peft": "0.21.2", "liger_kernel": "0.8.5"}
    skipped = [r.settings for r in rows if missing(r, installed)]
    assert all(
        s.get("attention") == "flash-attention-2" or s.get("method") == "qlora" or s.get("activation_offloading")
        for s in skipped
    )
    assert missing(Row("m", 1, 1, {"attention": "flash-attention-2", "method": "qlora"}), installed) == [
        "flash_attn",
        "bitsandbytes",
    ]
    assert not any(missing(r, installed) for r in rows if r.settings.get("loss_kernel") == "liger")
    assert grid(gpu=False, stack=True) == validate_device.CPU_GRID


def test_edge_rows_fill_the_gpu_to_the_share_and_no_further() -> None:
    from advisor.app import api
    from advisor.engine.allocator import ALLOCATOR_SLACK_BYTES

    def share(row: Row, micro: int) -> tuple[float, bool]:
        est = api.estimate(
            row.model,
            seq_len=row.seq_len,
            global_batch_size=micro,
            gpu="a100-80gb",
            **{**row.settings, "micro_batch_size": micro},
        )
        m = est.memory
        return (m.peak_bytes + m.components.cuda_context_bytes + ALLOCATOR_SLACK_BYTES) / m.capacity_bytes, m.fits

    rows = validate_device.edge_rows(gpu="a100-80gb")
    assert [r.model for r in rows] == [b.model for b in validate_device.EDGE_BASES]
    for row in rows:
        micro = row.settings["micro_batch_size"]
        assert row.global_batch_size == micro and row.settings["gradient_accumulation_steps"] == 1
        (inside, fits), (over, _) = share(row, micro), share(row, micro + 1)
        assert inside <= validate_device.EDGE_SHARE < over
        # the verdicts the first H100 bore out (benchmarks/results/validate_h100-sxm.jsonl): gpt2 at 62 ran out of
        # memory; Llama-3.1-8B LoRA at 3 ran with 67.4 GiB in use (the reserve's cap, advisor/engine/allocator.py)
        assert fits == (row.model != "gpt2"), row
    assert validate_device.edge_rows(gpu="t4")[0].settings["micro_batch_size"] < rows[0].settings["micro_batch_size"]


@pytest.mark.slow
def test_records_are_written_row_by_row_and_rendered_and_refit(tmp_path, monkeypatch) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "architectures": ["GPT2LMHeadModel"],
                "n_layer": 2,
                "n_embd": 128,
                "n_head": 4,
                "n_positions": 256,
                "vocab_size": 1000,
            }
        )
    )
    monkeypatch.setattr(validate_device, "CPU_GRID", [Row(str(config), 64, 8, {}), Row("no/such-model", 64, 8, {})])
    monkeypatch.setattr(validate_device, "matmul_rates", lambda: {"float32": 1.0, "bfloat16": 1.0})
    out = tmp_path / "out"
    validate_device.main(["--rows", "0", "--steps", "2", "--out-dir", str(out)])
    records = out / "validate_cpu.jsonl"
    lines = [json.loads(x) for x in records.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["run", "start", "row"] and lines[2]["row"] == 0
    runs, reports = read_records([records])
    ((_, report),) = reports
    assert report.trials[0].status == "ok"
    markdown = (out / "validate_cpu.md").read_text()
    precision = report.trials[0].plan.precision  # fp32, or bf16 on a CPU with AMX (rules/precision.py)
    assert (
        "--rows 0 --steps 2" in markdown
        and f"| {config} | 64 | {precision}, adamw, micro-batch 8 × 1 | plan | ok |" in markdown
        and "Peak: median |error|" in markdown
    )
    assert render(runs, reports) == markdown

    # a second run appends; a row that cannot run stops the script with the earlier rows kept
    with pytest.raises(ModelNotFoundError):
        validate_device.main(["--rows", "1", "--out-dir", str(out)])
    runs, reports = read_records([records])
    assert len(reports) == 1 and runs[0]["unfinished"] == []
    assert runs[1]["unfinished"] == ["row 1 (no/such-model seq 64 batch 8 {})"]  # begun, never reported
    assert "Began row 1 (no/such-model seq 64 batch 8 {}) and did not finish within the call." in render(runs, reports)

    refit = refit_device.report([r for _, r in reports], "cpu")
    assert "eager, standard loss, full | 1 |" in refit and "allocator reserve" not in refit  # no reserve on a CPU


def test_a_record_file_that_is_not_one_says_where(tmp_path, capsys) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"kind": "run"}\nnot json\n')
    with pytest.raises(ValueError, match=r"x.jsonl:2: not a validate_device record"):
        read_records([bad])
    with pytest.raises(SystemExit, match=r"refit_device: .*x.jsonl:2"):
        refit_device.main([str(bad)])
    with pytest.raises(SystemExit, match="no such file|No such file"):
        refit_device.main([str(tmp_path / "missing.jsonl")])
    with pytest.raises(SystemExit, match=r"validate_device: .*x.jsonl:2"):
        validate_device.main(["--render", str(bad)])


def test_the_grid_is_listed_with_plans_memory_and_time_for_a_catalog_gpu(capsys) -> None:
    validate_device.main(["--list", "--gpu", "h100-sxm", "--stack"])
    lines = capsys.readouterr().out.splitlines()
    rows = [x for x in lines if x[:1].isdigit()]
    assert len(rows) == len(validate_device.GPU_GRID) + len(validate_device.STACK_GRID)
    assert all(" GiB; about " in x for x in rows), rows  # every row plans on an H100 (no row is left to OOM)
    assert "micro-batch 1 × 8, eager" in rows[2] and lines[-1].startswith("about ")


def test_refit_device_reads_the_local_store_of_runs(tmp_path, monkeypatch, capsys) -> None:
    """issue 46: a user's runs (validate's trials, the callback's records) feed the same refit path as a lent GPU's
    records: per device and stack, predicted over measured step time and measured over predicted peak."""
    from advisor.measure import run_store
    from helpers import cpu_plan

    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path))
    plan = cpu_plan().model_dump(mode="json")
    for measured in (2.0, 2.0, 4.0):
        run_store.append(
            run_store.record(
                source=run_store.SOURCE_VALIDATE,
                device={"type": "cpu", "name": "cpu x"},
                model={"id": "gpt2", "task": "causal-lm"},
                plan=plan,
                seq_len=64,
                predicted={"step_time_s": 1.0, "peak_bytes": 100},
                measured={"step_time_s": measured, "peak_bytes": 110},
                notes="test",
            )
        )
    refit_device.main(["--store"])
    out = capsys.readouterr().out
    assert "3 runs" in out and "| cpu x |" in out
    assert "0.500 (n=3, range 0.250-0.500)" in out and "1.100 (n=3" in out
