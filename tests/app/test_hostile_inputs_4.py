"""Hostile inputs, round 4 (issue 44, what remained): item 17's older cases, and the surfaces added since the issue
was filed (the store of runs, ``--emit trl`` / ``slurm``, plan files, the Hub's environment), one test per cause (a
hypothesis property where a class of inputs is meant).

The CLI runs in-process (:func:`tests.app.test_hostile_inputs.cli`); cases that need a process of their own are marked
subprocess.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from advisor.core.errors import ExitCode
from advisor.measure import run_store
from test_emitted_scripts import SHELLCHECK, _with_strings
from test_hostile_inputs import assert_clean, cli

ROOT = Path(__file__).resolve().parents[2]
FEW = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
FORGED = "\x1b]0;owned\x07\x1b[2J\nadvisor: error: forged"


def _no_escapes(*texts: str) -> None:
    """Nothing a file said moves the cursor or forges a line: no ESC, BEL or carriage return reaches the terminal."""
    for text in texts:
        assert not {"\x1b", "\x07", "\r"} & set(text), text[:300]
        assert "advisor: error: forged" not in text.replace("\\n", "\n").splitlines(), text[:300]


# -- the store of runs: any line, any file type, any size -----------------------------------------------------------

JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
JSON_ANY = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=8,
)
RECORD_KEYS = ("date", "source", "device", "model", "plan", "seq_len", "predicted", "measured", "libraries", "notes")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fields=st.dictionaries(st.sampled_from(RECORD_KEYS), JSON_ANY | st.just(FORGED), max_size=6),
    plan_fields=st.dictionaries(
        st.sampled_from(["num_gpus", "method", "parallelism", "micro_batch_size", "attention", "global_batch_size"]),
        JSON_ANY,
        max_size=4,
    ),
)
@example(fields={"date": FORGED, "source": FORGED, "device": {"name": FORGED}, "model": {"id": FORGED}}, plan_fields={})
@example(fields={"device": "gpu", "model": [1], "predicted": 3, "measured": "x"}, plan_fields={"num_gpus": "x"})
@example(fields={"measured": {"tokens_per_s": 1e308, "peak_bytes": "9"}}, plan_fields={"num_gpus": 1e300})
def test_any_record_in_the_store_is_listed_exported_and_calibrated_cleanly(
    tmp_path_factory, fields: dict, plan_fields: dict
) -> None:
    """A store is a file anyone's run appended to, by hand or torn: a record of any shape is listed, exported and read
    by ``recommend``'s local calibration without an internal error, and its strings reach the terminal escaped."""
    if "plan" in fields and isinstance(fields["plan"], dict):
        fields["plan"].update(plan_fields)
    run_store.append({"version": 1, **fields})
    with open(run_store.store_path(), "ab") as store:  # what no writer writes: NaN, a line nested past the recursion
        store.write(b'{"version": 1, "measured": {"step_time_s": NaN}, "date": Infinity}\n' + b"[" * 10**5 + b"\n")
    for argv in (
        ("runs",),
        ("runs", "--json"),
        ("runs", "export", "--out", str(tmp_path_factory.mktemp("out"))),
        ("recommend", "--model", "gpt2", "--gpu", "t4", "--seq-len", "32"),
    ):
        code, out, err, seconds = cli(*argv)
        assert code == ExitCode.OK, (argv, err)
        assert_clean(code, err, seconds)
        if argv != ("runs", "--json"):
            _no_escapes(out, err)
    run_store.clear()


def test_a_store_that_is_not_a_regular_file_is_one_line_not_a_hang(tmp_path: Path, monkeypatch) -> None:
    """A FIFO at the store's path hung every ``recommend`` (the local calibration reads it) and ``runs``; a folder or
    /dev/zero was an internal error."""
    from test_hostile_inputs_3 import _within

    for kind in ("fifo", "folder", "device"):
        home = tmp_path / kind
        home.mkdir()
        path = home / run_store.STORE_FILE
        {"fifo": lambda: os.mkfifo(path), "folder": path.mkdir, "device": lambda: path.symlink_to("/dev/zero")}[kind]()
        monkeypatch.setenv("ADVISOR_HOME", str(home))
        for argv, want in (
            (("runs",), ExitCode.USAGE),
            (("runs", "--json"), ExitCode.USAGE),
            (("runs", "export", "--out", str(tmp_path / "out")), ExitCode.USAGE),
            (("runs", "clear"), ExitCode.OUTPUT),
            (("recommend", "--model", "gpt2", "--gpu", "t4", "--seq-len", "32"), ExitCode.OK),
        ):
            code, _, err, seconds = _within(20, cli, *argv)
            assert code == want, (kind, argv, err)
            assert_clean(code, err, seconds)
            if want != ExitCode.OK:
                assert "not a regular file" in err or "directory" in err, err
        with pytest.raises(OSError):
            _within(20, run_store.append, {"version": 1})  # validate and the callback turn it into a warning
        assert not (tmp_path / "out" / "local-runs.jsonl").exists()


def test_a_huge_store_is_read_from_its_newest_records_in_bounded_work(monkeypatch) -> None:
    """64 MiB of 14-byte records (4.8 million) took 12 CPU-s and 1.6 GB in every ``recommend`` and minutes in ``runs``:
    a reader parses the newest MAX_RECORDS and says how many older lines it left."""
    import resource

    line = b'{"version":1}\n'
    path = run_store.store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(line * (run_store.MAX_READ_BYTES // len(line) + 1000))
    cli("profile", "--model", "gpt2")  # imports, outside the measure
    for argv in (("runs",), ("runs", "--json"), ("recommend", "--model", "gpt2", "--gpu", "t4", "--seq-len", "32")):
        start = time.process_time()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        code, out, err, seconds = cli(*argv)
        spent = time.process_time() - start
        assert code == ExitCode.OK and spent < 5, (argv, spent, err[-300:])
        assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 2**30
        if argv[0] == "runs":
            assert f"read the newest {run_store.MAX_RECORDS:,} line(s)" in err and "older line(s) left unread" in err
    runs = run_store.read()
    assert len(runs.records) == run_store.MAX_RECORDS and runs.older > 4 * 10**6 and runs.skipped == 0


# -- item 17: the older set's five cases ---------------------------------------------------------------------------


def _immutable(path: Path) -> bool:
    """``chattr +i path`` (root cannot replace it either); False where the file system or the rights refuse."""
    import subprocess

    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    return done.returncode == 0


def test_item_17_a_read_only_target_a_null_size_and_a_memory_limit_past_the_device(tmp_path: Path) -> None:
    """Item 17: ``--emit`` into a read-only file target was an internal error (now exit 7, one line, nothing
    half-written); ``n_positions: null`` a TypeError (exit 4); ``validate --memory-limit 2TB`` on a smaller machine was
    accepted (exit 2)."""
    import subprocess

    out = tmp_path / "out"
    emit = ("recommend", "--model", "gpt2", "--gpu", "a100-80gb", "--seq-len", "64", "--emit", "all", "--out")
    assert cli(*emit, str(out))[0] == ExitCode.OK
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for target in ("/proc/version", "/proc/sys/kernel"):  # a file, a read-only folder
        code, _, err, seconds = cli(*emit, target)
        assert code == ExitCode.OUTPUT and len(err.strip().splitlines()) == 1, (target, err)
        assert_clean(code, err, seconds)
    if _immutable(out / "launch.sh"):
        try:
            code, _, err, seconds = cli(*emit[:6], "128", *emit[7:], str(out))
        finally:
            subprocess.run(["chattr", "-i", str(out / "launch.sh")], check=True)
        assert code == ExitCode.OUTPUT and "launch.sh" in err and "no file of the set was changed" in err, err
        assert_clean(code, err, seconds)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    (tmp_path / "null").mkdir()
    (tmp_path / "null" / "config.json").write_text(
        json.dumps(
            {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 100, "n_positions": None}
        )
    )
    for argv in (("profile",), ("recommend", "--gpu", "t4"), ("estimate", "--gpu", "t4"), ("compare", "--gpu", "t4")):
        code, _, err, seconds = cli(*argv, "--model", str(tmp_path / "null"))
        assert code == ExitCode.BAD_CONFIG and "n_positions: null" in err, (argv, err)
        assert_clean(code, err, seconds)
    code, _, err, seconds = cli("validate", "--model", "gpt2", "--seq-len", "32", "--memory-limit", "2TB")
    assert code == ExitCode.USAGE and "--memory-limit 1862.6 GiB is more than" in err and seconds < 5, err


@pytest.mark.subprocess  # huggingface_hub reads HF_ENDPOINT when imported: a fresh process each
@pytest.mark.parametrize(
    "endpoint, code",
    [
        ("http://127.0.0.1:9", ExitCode.OK),  # refused at once
        ("https://nonexistent.invalid", ExitCode.OK),  # no such name
        ("https://huggingface.co:notaport", ExitCode.OK),
        ("http://[::1", ExitCode.USAGE),
    ],
)  # not a URL: was a ValueError, exit 1
def test_item_17_an_unreachable_hub_is_one_note_not_the_librarys_warnings(
    tmp_path: Path, endpoint: str, code: int
) -> None:
    """Item 17: an unreachable Hub printed five lines of huggingface_hub's own warnings; now the card's one note, and
    an endpoint the library cannot parse one usage line."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy")}
    env.update(HF_ENDPOINT=endpoint, HF_HUB_CACHE=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "advisor", "profile", "--model", "gpt2", "--hub-timeout", "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    if code == ExitCode.OK:
        assert done.stderr == "" and "Model gpt2 (catalog)" in done.stdout, done.stderr
    else:
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("advisor: error: huggingface_hub cannot read its environment (HF_ENDPOINT, ") and (
            line.endswith("): Invalid IPv6 URL")
        ), line


# -- --emit slurm: no string of the recommendation runs in launch.slurm --------------------------------------------

MARK = "PWNED"
INJECTIONS = [
    f"\ntouch {MARK}\n#",
    f"'; touch {MARK}; '",
    f'"; touch {MARK}; "',
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f"\r\ntouch {MARK}",
    f"\\\ntouch {MARK}",
    f"\x1b]0;x\x07\ntouch {MARK}",
    f"\u2028touch {MARK}",
    f"\x85touch {MARK}",
]


@pytest.fixture(scope="module")
def slurm_rec():
    from advisor.app.api import recommend

    return recommend("gpt2", gpu="a100-80gb:8", nodes=2, seq_len=128, global_batch_size=64)


def _run_slurm(folder: Path, text: str):
    """launch.slurm run with stand-ins for srun, scontrol and torchrun (they print their arguments)."""
    import subprocess

    script = folder / "launch.slurm"
    script.write_text(text)
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("srun", 'exec "$@"'), ("scontrol", "echo node1"), ("torchrun", 'echo ran "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(folder),
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_JOB_ID": "1",
        "SLURM_SUBMIT_DIR": str(folder),
    }
    return subprocess.run(["bash", str(script)], cwd=folder, env=env, capture_output=True, text=True, timeout=30)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model_id=st.one_of(st.text(max_size=60), st.sampled_from(INJECTIONS).map(lambda s: "./models/x" + s)),
    gpu_name=st.one_of(st.just("NVIDIA A100"), st.text(max_size=30), st.sampled_from(INJECTIONS)),
)
@example(model_id="./m", gpu_name=f"A100\ntouch {MARK}\n#")  # the GPU's name reached a comment raw
@example(model_id=f"./m\u2028#SBATCH --x\ntouch {MARK}", gpu_name="NVIDIA A100")
def test_no_string_of_the_recommendation_runs_in_launch_slurm(
    slurm_rec, tmp_path_factory, model_id: str, gpu_name: str
) -> None:
    """``--emit slurm``: the model id and the GPU's name reach only comments (escaped: one line each) and a job name of
    safe characters; ``bash -n`` and shellcheck pass, and running it (with stand-ins) runs torchrun and nothing else."""
    import subprocess

    from advisor.app.emit_slurm import slurm_script

    text = slurm_script(_with_strings(slurm_rec, model_id, gpu_name))
    assert all(c.isprintable() for line in text.split("\n") for c in line), text  # each comment one printable line
    folder = tmp_path_factory.mktemp("slurm")
    assert subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0
    if SHELLCHECK is not None:
        (folder / "check.slurm").write_text(text)
        done = subprocess.run([SHELLCHECK, "--shell=bash", str(folder / "check.slurm")], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout
    done = _run_slurm(folder, text)
    assert done.returncode == 0 and done.stdout.startswith("ran "), done.stderr
    assert not list(folder.rglob(f"*{MARK}*")), sorted(folder.rglob("*"))
    directives = [line for line in text.split("\n") if line.startswith("#SBATCH")]
    assert len(directives) >= 3 and all(" --x" not in line for line in directives)


# -- the emitted train.py: the model id is a literal that gives the same string back --------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model_id=st.text(max_size=40)
    | st.sampled_from(INJECTIONS)
    | st.sampled_from(['"""; import os; os.system("touch PWNED") #', "'''", "\\", '\\"""', "\x00", "\ud800x"])
)
@example(model_id="./my-model-\U0001f917")  # an emoji: JSON's surrogate pair read back as two lone surrogates
def test_train_py_holds_the_model_id_as_a_literal_and_runs_nothing_else(slurm_rec, model_id: str) -> None:
    """``--emit hf`` writes train.py with the model id in its docstring and as ``MODEL``: whatever the id, the module
    is its docstring, imports, constants and functions (nothing runs at import), and ``MODEL`` is the id itself."""
    import ast

    from advisor.app.emit_train import train_script

    tree = ast.parse(train_script(_with_strings(slurm_rec, model_id, "NVIDIA A100")))
    kinds = [type(node).__name__ for node in tree.body]
    assert (
        kinds[0] == "Expr"
        and kinds.count("Expr") == 1
        and set(kinds) <= {"Expr", "Import", "ImportFrom", "Assign", "FunctionDef", "If"}
    ), kinds
    constants = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)}
    assert ast.literal_eval(constants["MODEL"]) == model_id


# -- validate --plan: a workload of another shape is one line, not the default seq-len -------------------------------


@pytest.mark.parametrize(
    "workload, words",
    [
        ("x", "workload must be an object, got str"),
        ([32], "workload must be an object, got list"),
        ({"seq_len": "32"}, 'got "32"'),
        ({"seq_len": 32.5}, "got 32.5"),
        ({"seq_len": True}, "got true"),
        ({"seq_len": None}, None),
    ],
)
def test_a_plan_files_workload_of_another_shape_is_one_usage_line(tmp_path: Path, workload, words: str | None) -> None:
    """A plan file's ``workload`` that was not an object, or a ``seq_len`` that was not a whole number, was ignored: the
    trial ran at the default sequence length (1,024 for gpt2, 32 times the plan's) with no word."""
    from advisor.app.progress import read_plan

    code, out, err, _ = cli("estimate", "--model", "gpt2", "--seq-len", "32", "--micro-batch-size", "1", "--json")
    assert code == ExitCode.OK, err
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**json.loads(out), "workload": workload}))
    if words is None:  # absent: the command's own --seq-len decides
        assert read_plan(str(path))[1] is None
        return
    code, _, err, seconds = cli("validate", "--model", "gpt2", "--plan", str(path), "--steps", "1")
    assert code == ExitCode.USAGE and words in err, err
    assert_clean(code, err, seconds)


# -- advisor.integrations: odd arguments are one UsageError, before the run -------------------------------------------


@FEW
@given(
    plan=st.one_of(
        st.none(),
        st.integers(),
        st.binary(max_size=4),
        st.lists(st.integers(), max_size=2),
        st.just(""),
        st.just("/dev/zero"),
        st.just({}),
    ),
    options=st.dictionaries(
        st.sampled_from(["warmup_steps", "measure_steps", "store", "warmup"]),
        st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.floats(0, 3), st.text(max_size=3)),
        min_size=1,
        max_size=2,
    ),
)
def test_the_integrations_refuse_odd_arguments_with_one_usage_error(plan, options: dict) -> None:
    """``track`` / ``Tracker`` / ``AdvisorCallback`` given a plan of another type (None, 8: TypeError), a device as the
    plan file, or options of another type ("2", None: TypeError; 2.5 accepted): one UsageError; the callback checks its
    options when it is made (they reached the Tracker only when the training began)."""
    from advisor.core.errors import UsageError
    from advisor.integrations.tracker import Tracker, check_options

    with pytest.raises(UsageError):
        Tracker(plan, store=False)

    def valid(name: str, value) -> bool:  # check_options' contract: whole numbers of steps >= 1, store a bool
        return type(value) is bool if name == "store" else name != "warmup" and type(value) is int and value >= 1

    if all(valid(k, v) for k, v in options.items()):
        check_options(**options)
        return
    with pytest.raises(UsageError):
        check_options(**options)


def test_non_finite_figures_of_a_plan_are_unknown_not_nan(tmp_path: Path) -> None:
    """A hand-edited plan with NaN (or a string, a negative size) as a figure made the summary say "nan" and the store
    refuse the record; such a figure is unknown."""
    from advisor.integrations.prediction import load

    code, out, err, _ = cli("estimate", "--model", "gpt2", "--seq-len", "32", "--json")
    data = json.loads(out)
    data["speed"].update(step_time_s=float("nan"), tokens_per_s="fast")
    data["memory"].update(peak_bytes=-1, device_bytes=float("inf"))
    prediction = load(data)
    assert (prediction.step_time_s, prediction.tokens_per_s, prediction.peak_bytes, prediction.device_bytes) == (
        None,
        None,
        None,
        None,
    )
    assert load(json.loads(out)).step_time_s == json.loads(out)["speed"]["step_time_s"]


# -- the done-when's walk: every command but validate, --simulate and the search's at the documented limits -----------

#: A config at every profile limit (advisor/core/limits.py: 2,048 layers, width 2^18, vocabulary and positions 2^24).
AT_LIMITS = {
    "model_type": "llama",
    "hidden_size": 2**18,
    "intermediate_size": 2**18,
    "num_hidden_layers": 2048,
    "num_attention_heads": 2,
    "vocab_size": 2**24,
    "max_position_embeddings": 2**24,
}
#: The command in-process, then its CPU time and its peak RSS (VmHWM: ru_maxrss keeps the forking parent's peak).
_MEASURED = (
    "import atexit, resource, sys\n"
    "def said():\n"
    "    r = resource.getrusage(resource.RUSAGE_SELF)\n"
    "    hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
    "    sys.__stderr__.write(f'\\nRUSAGE {r.ru_utime + r.ru_stime} {int(hwm) * 1024}\\n')\n"
    "atexit.register(said)\n"
    "from advisor.app.entry import main\n"
    "main(sys.argv[1:])\n"
)
WALK = [
    ("profile", "--model", "LIMITS"),
    ("estimate", "--model", "LIMITS", "--gpu", "a100-80gb", "--seq-len", str(2**24)),
    (
        "estimate",
        "--model",
        "LIMITS",
        "--gpu",
        "a100-80gb:128",
        "--nodes",
        "16384",
        "--micro-batch-size",
        "1",
        "--seq-len",
        str(2**24),
        "--tensor-parallel",
        "128",
        "--pipeline-parallel",
        "2048",
    ),
    ("estimate", "--model", "gpt2", "--gpu", "t4", "--micro-batch-size", str(2**24)),
    ("probe", "--gpu", "a100-80gb:128", "--nodes", "16384", "--json"),
    ("profile", "--model", "VALUES"),
    ("runs",),
    ("runs", "--json"),
    ("runs", "export", "--out", "OUT"),
    ("rules", "--json"),
    ("schema",),
    ("recommend", "--model", "gpt2", "--gpu", "a100-80gb:8", "--emit", "all", "--out", "OUT"),
]


@pytest.fixture(scope="module")
def at_limits(tmp_path_factory) -> dict[str, str]:
    """The inputs at the limits: the config above, a config of about MAX_JSON_VALUES values (refused or read: either
    within bounds), a store of runs of MAX_READ_BYTES of real records, an output folder."""
    from advisor.core.limits import MAX_JSON_VALUES

    root = tmp_path_factory.mktemp("limits")
    (root / "limits").mkdir()
    (root / "limits" / "config.json").write_text(json.dumps(AT_LIMITS))
    (root / "values").mkdir()
    (root / "values" / "config.json").write_text(json.dumps({**TINY_CONFIG, "junk": [0] * (MAX_JSON_VALUES // 2 - 50)}))
    code, out, err, _ = cli("estimate", "--model", "gpt2", "--seq-len", "32", "--micro-batch-size", "1", "--json")
    record = json.dumps(
        run_store.record(
            source="validate",
            device={"type": "cpu", "name": "x", "count": 1},
            model={"id": "gpt2", "task": "causal-lm"},
            plan=data_plan(out),
            seq_len=32,
            predicted={"step_time_s": 1.0},
            measured={"step_time_s": 1.1},
        )
    )
    (root / "home").mkdir()
    (root / "home" / run_store.STORE_FILE).write_text((record + "\n") * (run_store.MAX_READ_BYTES // len(record) + 1))
    return {
        "LIMITS": str(root / "limits"),
        "VALUES": str(root / "values"),
        "OUT": str(root / "out"),
        "HOME": str(root / "home"),
    }


TINY_CONFIG = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 100, "n_positions": 64}


def data_plan(estimate_json: str) -> dict:
    return json.loads(estimate_json)["plan"]


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("argv", WALK, ids=lambda argv: " ".join(argv[:3]))
def test_every_command_at_the_documented_limits_is_bounded(at_limits: dict[str, str], argv: tuple) -> None:
    """Issue 44's done-when: no command except validate's trials, --simulate and the search (recommend / compare at
    the search limits, the planner's own walk) uses more than 5 CPU-seconds or 1 GiB on any input within the documented
    limits. Each runs in a process of its own (start-up included), which reports its CPU time and peak RSS."""
    import subprocess
    import sys

    args = [at_limits.get(a, a) for a in argv]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ADVISOR_HOME": at_limits["HOME"], "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    *said, usage = done.stderr.strip().splitlines()
    cpu_s, rss = usage.split()[1:]
    assert done.returncode in (ExitCode.OK, ExitCode.USAGE, ExitCode.BAD_CONFIG), done.stderr[-500:]
    assert "Traceback" not in done.stderr and len(said) <= 12, said
    assert float(cpu_s) < 5 and int(rss) < 2**30, (argv, cpu_s, int(rss) / 2**20)
