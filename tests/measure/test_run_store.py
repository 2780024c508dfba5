"""The local store of measured runs: concurrent writers, a torn line, where it lives (advisor/measure/run_store.py)."""

from __future__ import annotations

import json
import multiprocessing
import os

from advisor.measure import run_store


def _write_many(path: str, writer: int, count: int) -> None:
    for i in range(count):
        run_store.append({"version": 1, "writer": writer, "i": i, "pad": "x" * 5000}, path=run_store.Path(path))


def test_concurrent_writers_never_interleave(tmp_path) -> None:
    path = tmp_path / "runs.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_many, args=(str(path), w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    runs = run_store.read(path)
    assert runs.skipped == 0
    assert len(runs.records) == 160
    for w in range(4):
        assert [r["i"] for r in runs.records if r["writer"] == w] == list(range(40))


def test_a_torn_trailing_line_is_skipped_and_closed_by_the_next_writer(tmp_path) -> None:
    path = tmp_path / "runs.jsonl"
    run_store.append({"version": 1, "n": 1}, path=path)
    with open(path, "ab") as f:  # a writer killed mid-write
        f.write(b'{"version": 1, "n": 2, "pad": "abc')
    runs = run_store.read(path)
    assert [r["n"] for r in runs.records] == [1] and runs.skipped == 1
    run_store.append({"version": 1, "n": 3}, path=path)
    runs = run_store.read(path)
    assert [r["n"] for r in runs.records] == [1, 3] and runs.skipped == 1
    assert path.read_bytes().count(b"\n") == 3


def test_foreign_lines_are_skipped(tmp_path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text('[1, 2]\n{"version": 99}\nnot json\n{"version": 1, "ok": true}\n')
    runs = run_store.read(path)
    assert runs.records == [{"version": 1, "ok": True}] and runs.skipped == 3


def test_where_the_store_lives(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / "home"))
    assert run_store.store_path() == tmp_path / "home" / "runs.jsonl"
    monkeypatch.delenv("ADVISOR_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert run_store.store_path() == tmp_path / "xdg" / "advisor" / "runs.jsonl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert run_store.store_path() == tmp_path / "user" / ".cache" / "advisor" / "runs.jsonl"


def test_the_tests_never_see_the_users_store() -> None:
    assert not os.environ["ADVISOR_HOME"].startswith(os.path.expanduser("~/.cache"))
    assert run_store.read().records == []


def test_clear_and_a_record(tmp_path) -> None:
    path = tmp_path / "runs.jsonl"
    rec = run_store.record(
        source=run_store.SOURCE_CALLBACK,
        device={"type": "cpu", "name": "x", "count": 1, "driver": None},
        model={"id": "m", "task": "causal-lm"},
        plan={},
        seq_len=8,
        predicted={"step_time_s": 1.0},
        measured={"step_time_s": 2.0},
    )
    run_store.append(rec, path=path)
    assert json.loads(path.read_text())["libraries"]["torch"]
    assert run_store.clear(path) == 1
    assert run_store.read(path).records == [] and path.exists()
