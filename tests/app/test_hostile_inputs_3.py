"""Hostile inputs, round 3 (issue 44): one test per cause (a hypothesis property where a class of inputs is meant).

The CLI runs in-process (:func:`tests.app.test_hostile_inputs.cli`); the few cases that need a process of their own
(closed streams, encodings, signals during imports) are marked subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from advisor.core.errors import ExitCode, UsageError
from advisor.core.text import MAX_LINE, shown
from test_hostile_inputs import TINY, assert_clean, cli

ROOT = Path(__file__).resolve().parents[2]
FEW = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
FORGED = "\x1b]0;owned\x07\x1b[2J\nadvisor: error: forged"


def _one_clean_line(stderr: str) -> None:
    """Item 2: what a file said reaches the terminal as one printable line of bounded length."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].isprintable() and len(lines[0]) <= 12 * MAX_LINE, lines[0][:300]


# -- 2. strings from files reach the terminal through one function ----------------------------------------------


@FEW
@given(text=st.text(min_size=1, max_size=300))
@example(text=FORGED)
@example(text="x" * 2**20)  # a 1 MiB model_type was echoed whole
def test_a_files_strings_reach_the_terminal_escaped_and_cut(tmp_path_factory, text: str) -> None:
    folder = tmp_path_factory.mktemp("shown")
    cases = {
        "model_type": {"model_type": text},
        "quant_method": {**TINY, "quantization_config": {"quant_method": text, "bits": 4}},
    }
    for name, config in cases.items():
        (folder / name).mkdir()
        (folder / name / "config.json").write_text(json.dumps(config))
    (folder / "adapter").mkdir()
    (folder / "adapter" / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": text, "peft_type": "LORA", "r": 8})
    )
    for name in ("model_type", "adapter"):
        code, out, err, seconds = cli("profile", "--model", str(folder / name))
        assert_clean(code, err, seconds)
        if code != ExitCode.OK:  # a real model_type ("switch_transformers") profiles from its defaults
            _one_clean_line(err)
        assert "\x1b" not in out + err
    code, out, err, seconds = cli(
        "recommend",
        "--model",
        str(folder / "quant_method"),
        "--gpu",
        "a100-80gb",
        "--method",
        "full",
        "--seq-len",
        "32",
        "--global-batch-size",
        "4",
    )
    assert "\x1b" not in out + err
    if code != ExitCode.OK:
        _one_clean_line(err)


# -- 4. only regular files are read -------------------------------------------------------------------------------


def _within(seconds: float, fn, *args):
    """fn(*args) in a daemon thread: its result, or a failure when it has not returned in ``seconds`` (a hang)."""
    import threading

    box: dict = {}

    def target() -> None:
        try:
            box["out"] = fn(*args)
        except BaseException as exc:  # raised again in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__}{args} still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("out")


def test_fifos_are_refused_not_waited_on(tmp_path: Path) -> None:
    from advisor.app.api import profile_model
    from advisor.core.errors import ModelNotFoundError
    from probes.config_check import read_bounded

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    os.mkfifo(adapter / "adapter_config.json")
    os.mkfifo(tmp_path / "plan.json")
    os.mkfifo(tmp_path / "config.json")
    for argv, code in (
        (("profile", "--model", str(adapter)), ExitCode.MODEL_NOT_FOUND),
        (("recommend", "--model", str(adapter), "--gpu", "t4"), ExitCode.MODEL_NOT_FOUND),
        (("validate", "--model", "gpt2", "--plan", str(tmp_path / "plan.json")), ExitCode.USAGE),
    ):
        code_, _, err, seconds = _within(20, cli, *argv)
        assert code_ == code, err
        assert_clean(code_, err, seconds)
    with pytest.raises(ModelNotFoundError):
        _within(20, lambda: profile_model(str(adapter)))
    with pytest.raises(ValueError, match="not a regular file"):
        _within(20, read_bounded, tmp_path / "config.json")


# -- 12. huge sizes are one line --------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    flag=st.sampled_from(["--host-memory", "--cuda-context", "--memory-limit"]),
    digits=st.integers(19, 500),
    unit=st.sampled_from(["", "GB", "TiB", ".5GiB"]),
)
@example(flag="--host-memory", digits=400, unit="")
def test_a_size_of_any_length_is_one_usage_line(flag: str, digits: int, unit: str) -> None:
    import argparse

    from advisor.app.options import size

    text = "9" * digits + unit
    code, _, err, seconds = cli("validate" if flag == "--memory-limit" else "estimate", "--model", "gpt2", flag, text)
    assert code == ExitCode.USAGE and "1 EiB" in err
    assert_clean(code, err, seconds)
    with pytest.raises(argparse.ArgumentTypeError, match="1 EiB"):
        size(text)


# -- 11. operating-system errors outside the write path; 13. Ctrl-C during the imports ------------------------------


def _advisor(*argv: str, shell_tail: str = "", env: dict | None = None, timeout: float = 60) -> tuple[int, str, str]:
    """``python -m advisor ARGV`` in a shell (so that ``>&-`` can close a stream): (exit code, stdout, stderr)."""
    import shlex

    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "advisor", *argv)) + " " + shell_tail
    done = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.subprocess
def test_closed_streams_encodings_and_long_names_are_documented_codes(tmp_path: Path) -> None:
    card = ("recommend", "--model", "gpt2", "--gpu", "t4")
    code, _, err = _advisor(*card, shell_tail=">&-")  # stdout closed: the card cannot be written
    assert code == ExitCode.OUTPUT and err.strip().splitlines() == [
        "advisor: error: cannot write the output: stdout is closed"
    ], err
    code, out, err = _advisor(*card, "--seq-len", "0", shell_tail="2>&-")  # stderr closed: the code stays
    assert code == ExitCode.USAGE and out == ""
    code, out, err = _advisor(*card, env={"PYTHONIOENCODING": "ascii"})  # the card's x cannot be spelt
    assert code == ExitCode.OK and "Traceback" not in err and "micro-batch" in out, err
    code, out, err = _advisor(*card, "--json", env={"PYTHONIOENCODING": "ascii"})
    assert code == ExitCode.OK and json.loads(out)["plan"]
    for out_dir in ("a" * 300, str(tmp_path / ("b" * 300) / "c")):
        code, _, err = _advisor(*card, "--emit", "hf", "--out", out_dir)
        assert code == ExitCode.OUTPUT and len(err.strip().splitlines()) == 1 and "too long" in err, err


@pytest.mark.subprocess
@pytest.mark.parametrize("delay_s", [0.15, 0.3, 0.45])
def test_ctrl_c_while_importing_is_exit_130_without_a_traceback(delay_s: float) -> None:
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "recommend", "--model", "gpt2", "--gpu", "t4"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    if "init_import_site" in err:  # the signal came while Python itself started, before any of advisor ran
        pytest.skip("Ctrl-C landed in the interpreter's own start-up")
    assert proc.returncode in (ExitCode.INTERRUPTED, ExitCode.OK), (proc.returncode, err)
    assert "Traceback" not in err, err
    if proc.returncode == ExitCode.INTERRUPTED:
        assert err.strip().splitlines() == ["advisor: interrupted"], err


# -- 9. all or nothing, a refused rename included; 10. no stale files of an earlier set ---------------------------


def test_a_refused_rename_leaves_the_set_as_it_was(tmp_path: Path, monkeypatch) -> None:
    import advisor.app.files as files

    out = tmp_path / "out"
    argv = ("recommend", "--model", "gpt2", "--gpu", "a100-80gb:2", "--emit", "all", "--out", str(out), "--json")
    assert cli(*argv)[0] == ExitCode.OK
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real_replace, real_rename = os.replace, os.rename

    def refuse(src, dst, *a, **k):  # launch.sh is immutable, or someone else's in a sticky folder
        if Path(src).name == "launch.sh" or Path(dst).name == "launch.sh":
            raise PermissionError(1, "Operation not permitted")
        return (real_replace if refuse.replace else real_rename)(src, dst, *a, **k)

    for name in ("replace", "rename"):
        refuse.replace = name == "replace"
        monkeypatch.setattr(files.os, name, refuse)
        code, out_text, err, seconds = cli(*argv[:-1] + ("--seq-len", "256", "--json"))
        monkeypatch.setattr(files.os, name, real_replace if refuse.replace else real_rename)
        assert code == ExitCode.OUTPUT and "launch.sh" in err and "Operation not permitted" in err, err
        assert_clean(code, err, seconds)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing changed, nothing left behind
    with pytest.raises(Exception, match="cannot replace") as raised:
        monkeypatch.setattr(files.os, "replace", lambda *a: (_ for _ in ()).throw(PermissionError(1, "denied")))
        files.write_atomic(out / "report.json", "{}")
    assert raised.type.__name__ == "OutputError"


def test_an_earlier_sets_files_are_removed_and_no_others(tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = ("recommend", "--model", "gpt2", "--gpu", "a100-80gb", "--emit", "hf", "--out", str(out), "--json")
    assert cli(*base, "--method", "lora")[0] == ExitCode.OK
    assert (out / "lora_config.json").is_file()
    (out / "ds_config.json").write_text("{}")  # the user's own, not advisor's
    (tmp_path / "victim").write_text("keep")
    manifest = json.loads((out / ".advisor-emitted.json").read_text())
    manifest["files"] += ["../victim", "/etc/hostname"]  # a hostile manifest names other paths
    (out / ".advisor-emitted.json").write_text(json.dumps(manifest))
    assert cli(*base, "--method", "full")[0] == ExitCode.OK
    assert not (out / "lora_config.json").exists()  # the LoRA set's file is gone with it
    assert (out / "ds_config.json").read_text() == "{}" and (tmp_path / "victim").read_text() == "keep"
    assert sorted(p.name for p in out.iterdir()) == [
        ".advisor-emitted.json",
        "ds_config.json",
        "model_kwargs.json",
        "plan.json",
        "train.py",
        "training_args.json",
    ]
    assert cli(*base[:-4], "torchrun", "--out", str(out), "--json")[0] == ExitCode.OK  # another target: kept
    assert (out / "training_args.json").is_file()
    assert json.loads((out / ".advisor-emitted.json").read_text())["files"] == [
        "launch.sh",
        "model_kwargs.json",
        "plan.json",
        "train.py",
        "training_args.json",
    ]


# -- 3. a plan is checked against the machine it runs on ---------------------------------------------------------


def _plan_file(folder: Path, name: str, plan_changes: dict, workload: dict | None = None) -> str:
    code, out, err, _ = cli("estimate", "--model", "gpt2", "--seq-len", "32", "--micro-batch-size", "1", "--json")
    assert code == ExitCode.OK, err
    data = json.loads(out)
    data["plan"].update(plan_changes)
    data["workload"] = {"seq_len": 32, **(workload or {})}
    (folder / name).write_text(json.dumps(data))
    return str(folder / name)


def test_a_plan_asks_the_machine_only_for_what_it_has(tmp_path: Path) -> None:
    from conftest import facts
    from advisor.measure.validation import RANK_RAM_BYTES, check_machine
    from rules import Plan

    small = facts({"gpu": "cpu", "host": {"cores": 2, "ram_gib": 1}}, seq_len=32, global_batch_size=4)
    host = small.hardware.host.model_copy(update={"ram_bytes": RANK_RAM_BYTES + 1})  # RAM for one rank
    tiny_ram = small.model_copy(update={"hardware": small.hardware.model_copy(update={"host": host})})
    cpu = Plan(
        device="cpu",
        precision="fp32",
        tf32=False,
        optimizer="adamw",
        gradient_checkpointing=False,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        parallelism="ddp",
        num_gpus=0,
    )
    for machine, plan, words in (
        (small, cpu.model_copy(update={"num_gpus": 3}), "names 3 GPUs"),
        (small, cpu.model_copy(update={"device": "cuda", "num_gpus": 100_000}), "this machine has 0"),
        (small, cpu.model_copy(update={"cpu_processes": 128}), "128 CPU processes .* 2 cores"),
        (tiny_ram, cpu.model_copy(update={"cpu_processes": 2}), "RAM"),
    ):
        with pytest.raises(UsageError, match=words):
            check_machine(machine, plan)
    with pytest.raises(Exception, match="--memory-limit 2048.0 GiB is more than"):
        check_machine(small, cpu, memory_limit_bytes=2**41)
    check_machine(small, cpu.model_copy(update={"cpu_processes": 2}))  # what the machine has is fine
    # end to end: the CPU plan that named 3 GPUs ran a 3-rank torchrun and was "confirmed"
    path = _plan_file(tmp_path, "gpus.json", {"num_gpus": 3, "parallelism": "ddp"})
    code, _, err, seconds = cli("validate", "--model", "gpt2", "--plan", path, "--steps", "1", "--warmup", "1")
    assert code == ExitCode.USAGE and "names 3 GPUs" in err, err
    assert_clean(code, err, seconds)


# -- 8. the global batch product; 14. plan-file counts, seq-len and config keys; 17. null sizes ------------------


def test_counts_within_their_limits_make_no_unbounded_product_or_bad_plan(tmp_path: Path) -> None:
    code, _, err, seconds = cli(
        "estimate",
        "--model",
        "gpt2",
        "--gpu",
        "t4",
        "--micro-batch-size",
        str(2**24),
        "--gradient-accumulation-steps",
        str(2**24),
    )
    assert code == ExitCode.USAGE and "281,474,976,710,656" in err and seconds < 5, err
    for changes, words in (
        ({"expert_parallel": 0}, "plan.expert_parallel must be from 1"),
        ({"expert_parallel": -3}, "plan.expert_parallel must be from 1"),
        ({"micro_batch_size": 2**24, "gradient_accumulation_steps": 2**24}, "global batch"),
    ):
        code, _, err, seconds = cli("validate", "--model", "gpt2", "--plan", _plan_file(tmp_path, "p.json", changes))
        assert code == ExitCode.USAGE and words in err, err
        assert_clean(code, err, seconds)
    code, _, err, _ = cli("validate", "--model", "gpt2", "--plan", _plan_file(tmp_path, "s.json", {}, {"seq_len": 0}))
    assert code == ExitCode.USAGE and "workload.seq_len must be from 1" in err and "--seq-len" not in err, err


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"__class__": 1}, "__class__ is not a config field"),
        ({"__dict__": {}}, "__dict__ is not a config field"),
        ({"n_positions": None}, "wpe.weight null"),
    ],
)
def test_config_keys_and_null_sizes_are_bad_configs(tmp_path: Path, fields: dict, words: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**TINY, **fields}))
    for command in ("profile", "recommend"):
        code, _, err, seconds = cli(command, "--model", str(tmp_path))
        assert code == ExitCode.BAD_CONFIG and words in err, err
        assert_clean(code, err, seconds)


# -- 5. the no-fit path is bounded -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, cpu_s",
    [
        (("--model", "TINY", "--gpu", "a100-80gb", "--cuda-context", "85GB"), 1.0),  # was 52-81 CPU-s
        (("--model", "TINY", "--gpu", "a100-80gb:8", "--nodes", "4", "--cuda-context", "85GB"), 1.0),
        (("--model", "TINY", "--gpu", "t4", "--cuda-context", str(2**60)), 1.0),
        (
            ("--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80gb", "--method", "lora", "--lora-rank", "262144"),
            3.0,
        ),
    ],
)
def test_a_no_fit_answer_is_bounded(tmp_path: Path, argv: tuple, cpu_s: float) -> None:
    import time

    (tmp_path / "config.json").write_text(json.dumps(TINY))
    argv = tuple(str(tmp_path) if a == "TINY" else a for a in argv)
    cli("recommend", *argv[:2], "--gpu", "t4")  # imports and caches, outside the measure
    start = time.process_time()
    code, out, err, seconds = cli("recommend", *argv)
    spent = time.process_time() - start
    assert code == ExitCode.NO_FIT, err
    assert_clean(code, err, seconds)
    assert spent < cpu_s, f"{spent:.2f} CPU-s"
    if "--cuda-context" in argv:
        assert "the CUDA context alone takes" in err


# -- 6. validate makes its batches as the steps consume them -----------------------------------------------------


@pytest.mark.slow
def test_trial_rows_are_made_lazily_and_the_same_each_time() -> None:
    import time
    import tracemalloc

    from advisor.measure.trainable import SyntheticRows
    from probes.model import profile_model

    import torch  # noqa: F401  (imported outside the measure)

    model = profile_model("gpt2")
    tracemalloc.start()
    start = time.perf_counter()
    rows = SyntheticRows(model, None, 2**24 * 64, 32)  # 2^24 samples x 64 steps: ~100 GB up front
    first = rows[0]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(rows) == 2**30 and peak < 16 * 2**20 and time.perf_counter() - start < 5
    assert first["input_ids"].shape == (32,) and first["labels"].shape == (32,)
    assert all((rows[5][k] == SyntheticRows(model, None, 10, 32)[5][k]).all() for k in first)
    assert not (rows[5]["input_ids"] == rows[6]["input_ids"]).all()


# -- 7. the documented limits allow bounded work -----------------------------------------------------------------


def _cpu(*argv: str) -> tuple[int, str, float]:
    import time

    start = time.process_time()
    code, _, err, seconds = cli(*argv)
    assert_clean(code, err, seconds)
    return code, err, time.process_time() - start


AT_LIMITS = {
    "model_type": "llama",
    "hidden_size": 2**18,
    "intermediate_size": 2**18,
    "num_hidden_layers": 2048,
    "num_attention_heads": 2,
    "vocab_size": 2**24,
    "max_position_embeddings": 2**24,
}


@pytest.mark.parametrize(
    "argv",
    [
        ("profile",),
        ("estimate", "--gpu", "a100-80gb"),
        ("recommend", "--gpu", "a100-80gb"),
        ("recommend", "--gpu", "a100-80gb:8", "--nodes", "4"),
    ],
)
def test_the_limits_are_walked_in_bounded_work(tmp_path: Path, argv: tuple) -> None:
    from advisor.core.limits import MAX_LAYERS, MAX_VOCAB, MAX_WIDTH

    assert (AT_LIMITS["num_hidden_layers"], AT_LIMITS["hidden_size"], AT_LIMITS["vocab_size"]) == (
        MAX_LAYERS,
        MAX_WIDTH,
        MAX_VOCAB,
    )
    (tmp_path / "config.json").write_text(json.dumps(AT_LIMITS))
    cli("profile", "--model", "gpt2")  # imports, outside the measure
    code, err, spent = _cpu(*argv, "--model", str(tmp_path))
    assert spent < 5, (argv, spent)


def test_a_simulation_and_a_config_too_large_for_bounded_work_are_refused(tmp_path: Path) -> None:
    from advisor.core.limits import MAX_JSON_VALUES, MAX_LAYERS, MAX_SIMULATED_LAYERS

    (tmp_path / "limits").mkdir()
    (tmp_path / "limits" / "config.json").write_text(json.dumps(AT_LIMITS))
    code, err, spent = _cpu("estimate", "--model", str(tmp_path / "limits"), "--simulate")  # ran past 240 s
    assert code == ExitCode.USAGE and f"{MAX_LAYERS:,} blocks" in err and str(MAX_SIMULATED_LAYERS) in err, err
    assert spent < 5, spent
    (tmp_path / "many").mkdir()  # 16 MiB of small objects: was 12-20 CPU-s and 826 MiB
    (tmp_path / "many" / "config.json").write_text(
        json.dumps({**TINY, "junk": [{}] * (16 * 2**20 // 4)})[: 16 * 2**20 - 2] + "]}"
    )
    code, err, spent = _cpu("profile", "--model", str(tmp_path / "many"))
    assert code == ExitCode.BAD_CONFIG and f"over {MAX_JSON_VALUES:,} JSON values" in err and spent < 2, (err, spent)


# -- 15. compare refuses what recommend refuses; 16. the API's arguments of the wrong type --------------------------


def test_compare_says_no_plan_can_run_as_recommend_does(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({**TINY, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}})
    )
    argv = ("--model", str(tmp_path), "--method", "full", "--gpu", "t4")
    recommended = cli("recommend", *argv)
    compared = cli("compare", *argv, "--gpu", "a100-80gb")
    assert recommended[0] == compared[0] == ExitCode.USAGE, compared[2]
    assert compared[2] == recommended[2] and "pre-quantized-checkpoint" in compared[2]
    assert cli("compare", "--model", str(tmp_path), "--gpu", "t4")[0] == ExitCode.OK  # QLoRA runs


@FEW
@given(
    bad=st.sampled_from([None, 8, "hf", 1.5, b"x", {"a": 1}, [8], ["hf", None]]),
    where=st.sampled_from(["emit_targets", "emit_out", "emit_rec", "compare_gpus", "compare_tokens", "validate_plan"]),
)
def test_the_apis_arguments_of_the_wrong_type_are_usage_errors(tmp_path_factory, bad, where: str) -> None:
    from advisor.app.api import estimate, recommend, validate
    from advisor.app.compare import compare
    from advisor.app.emit import emit

    rec = recommend("gpt2", gpu="a100-80gb", seq_len=32, global_batch_size=4)
    out = tmp_path_factory.mktemp("api")
    calls = {
        "emit_targets": lambda: emit(rec, bad, out),
        "emit_out": lambda: emit(rec, ["hf"], bad),
        "emit_rec": lambda: emit(estimate("gpt2", gpu="t4", seq_len=32) if bad is None else bad, ["hf"], out),
        "compare_gpus": lambda: compare("gpt2", gpus=bad, seq_len=32),
        "compare_tokens": lambda: compare("gpt2", gpus=["t4"], tokens=bad, seq_len=32),
        "validate_plan": lambda: validate("gpt2", plan=rec.plan.model_copy(update={"micro_batch_size": 0})),
    }
    valid = (
        (where == "emit_targets" and bad == ["hf"])
        or (where == "emit_out" and isinstance(bad, str))
        or (where == "compare_gpus" and bad is None)
        or (where == "compare_tokens" and bad == 8)
    )
    if valid:
        return
    with pytest.raises(UsageError):
        calls[where]()


@pytest.mark.subprocess
def test_ctrl_c_before_validates_first_trial_stops_at_once(tmp_path: Path) -> None:
    """Item 17: Ctrl-C while validate imports torch or searches its plan was only noted for a step boundary that was
    tens of seconds away; with no trial started there is no step to finish."""
    import signal
    import time

    (tmp_path / "config.json").write_text(json.dumps(TINY))
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "validate", "--model", str(tmp_path), "--seq-len", "32", "--steps", "100000"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    time.sleep(0.6)  # the command's imports are done; torch's are not (or, on a fast machine, the trial started)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED and time.monotonic() - sent < 15, err
    assert "Traceback" not in err and "interrupted" in err, err
    if "trial 1" not in err:  # it came before the first trial: no step boundary to wait for
        assert err.strip().splitlines() == ["advisor: interrupted"], err


@pytest.mark.parametrize("name", ["a[/b]", "[bold]x[/bold]", "c[/]d", "e[red]", "f\x1b[2Jg"])
def test_a_model_path_is_text_not_markup(tmp_path: Path, monkeypatch, name: str) -> None:
    """A folder path with rich's markup in it ("a[/b]": folder "a[" holding "b]") was a MarkupError, exit 1."""
    monkeypatch.chdir(tmp_path)  # a short relative path: shown whole, not wrapped
    model = Path(name)
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(TINY))
    for argv in (
        ("profile",),
        ("estimate", "--gpu", "t4"),
        ("recommend", "--gpu", "t4", "--explain"),
        ("compare", "--gpu", "t4"),
    ):
        workload = () if argv[0] == "profile" else ("--seq-len", "32")
        code, out, err, _ = cli(*argv, "--model", str(model), *workload)
        assert code == ExitCode.OK and "internal error" not in err, err
        assert shown(name) in out and "\x1b" not in out, out[:400]  # as it is, its control characters escaped
