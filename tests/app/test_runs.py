"""``advisor runs``: list, export in the published runs' format, clear; bad input is one line and exit 2."""

from __future__ import annotations

import json

from advisor.core.errors import ExitCode
from advisor.measure import run_store

from cli_runner import run_cli
from helpers import cpu_plan


def _add(step_time: float = 0.12, source: str = run_store.SOURCE_VALIDATE) -> dict:
    rec = run_store.record(
        source=source,
        device={"type": "cpu", "name": "Test CPU", "count": 1, "driver": None},
        model={"id": "gpt2", "task": "causal-lm"},
        plan=cpu_plan().model_dump(mode="json"),
        seq_len=64,
        predicted={"step_time_s": 0.1, "peak_bytes": 2**30},
        measured={"step_time_s": step_time, "tokens_per_s": 8 * 64 / step_time, "peak_bytes": 2**30 + 2**28},
    )
    run_store.append(rec)
    return rec


def test_runs_lists_the_records_in_a_table_and_as_json() -> None:
    code, out, err = run_cli(["runs"])
    assert code == ExitCode.OK and out == "" and "no measured runs yet" in err
    _add()
    _add(0.2, run_store.SOURCE_CALLBACK)
    code, out, _ = run_cli(["runs"])
    assert code == ExitCode.OK and "measured runs (2" in out and "0.100 / 0.120" in out and "callback" in out
    code, out, _ = run_cli(["runs", "--json"])
    records = json.loads(out)
    assert code == ExitCode.OK and [r["measured"]["step_time_s"] for r in records] == [0.12, 0.2]


def test_a_torn_line_is_skipped_with_a_note() -> None:
    _add()
    with open(run_store.store_path(), "ab") as f:
        f.write(b'{"version": 1, "torn')
    code, out, err = run_cli(["runs", "--json"])
    assert code == ExitCode.OK and len(json.loads(out)) == 1 and "skipped 1 malformed line" in err


def test_export_writes_the_published_format(tmp_path) -> None:
    _add()
    code, _, err = run_cli(["runs", "export", "--out", str(tmp_path / "out")])
    assert code == ExitCode.OK and "wrote 1 run(s)" in err
    (line,) = (tmp_path / "out" / "local-runs.jsonl").read_text().splitlines()
    exported = json.loads(line)
    published = json.loads(open("benchmarks/published/peft-method-comparison.jsonl").readline())
    assert exported.keys() == published.keys()
    for part in ("source", "hardware", "model", "workload", "stack", "measured"):
        assert published[part].keys() <= exported[part].keys(), part
    assert exported["measured"]["memory_bytes"] == 2**30 + 2**28 and exported["workload"]["seq_len"] == 64


def test_clear_empties_the_store() -> None:
    _add()
    _add()
    code, _, err = run_cli(["runs", "clear"])
    assert code == ExitCode.OK and "cleared 2 run(s)" in err
    assert run_store.read().records == []


def test_bad_input_is_one_line_and_exit_2(tmp_path) -> None:
    afile = tmp_path / "f"
    afile.write_text("x")
    for argv in (["runs", "export", "--out", str(afile)], ["runs", "bogus"], ["runs", "export"]):
        code, out, err = run_cli(argv)
        assert code == ExitCode.USAGE and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
