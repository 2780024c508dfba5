"""Hostile and odd inputs (issue 15): each reproduced defect as a test, then property-based tests that draw
hostile configs, flags, plan files and API arguments, with invariants that hold for every one of them:

1. the exit code is in the documented table (``ExitCode``, README "Exit codes");
2. no traceback and at most 3 stderr lines on error;
3. bounded time;
4. no stray files;
5. a bad config.json is exit 4 naming the field;
6. a ``--plan`` file is a Plan or one UsageError line;
7. the API raises only ``AdvisorError`` subclasses;
8. on valid inputs micro-batch × accumulation × data-parallel = global batch;
9. memory grows with the micro-batch and with the sequence length;
10. the JSON output round-trips through the schema and the same inputs give the same output;
11. ``divisors`` is exact and cheap;
12. an output target that is not a regular file is refused with exit 7 and left as it was.

The CLI runs in-process through :func:`advisor.app.cli.run` (stdout and stderr captured), so a hundred runs
take seconds; ``deadline=None`` (the first run imports), ``max_examples`` modest for 2 cores.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from advisor.app import api
from advisor.app.cli import run
from advisor.app.progress import read_plan
from advisor.core.errors import AdvisorError, BadConfigError, ExitCode, UsageError
from advisor.core.limits import MAX_GLOBAL_BATCH_SIZE, MAX_GPUS_PER_NODE, MAX_LAYERS, divisors
from probes.model import profile_from_config

ROOT = Path(__file__).resolve().parents[2]
CODES = {int(c) for c in ExitCode}
SLOW_S = 20.0  #: bounded time: far above a run's usual second, far below a hang
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TINY = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 100, "n_positions": 64}


def cli(*argv: str) -> tuple[int, str, str, float]:
    """Run the CLI in-process: (exit code, stdout, stderr, seconds)."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run(list(argv))
        except SystemExit as exit_:  # argparse
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - start


def assert_clean(code: int, stderr: str, seconds: float) -> None:
    """Invariants 1-3: a documented code, no traceback, one short error, bounded time."""
    assert code in CODES, (code, stderr)
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    if code not in (ExitCode.OK, ExitCode.NO_FIT):
        assert 1 <= len(stderr.strip().splitlines()) <= 3, stderr
    assert seconds < SLOW_S, seconds


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hostile")
    (path / "tiny.json").write_text(json.dumps(TINY))
    return path


# -- each defect of the issue, reproduced ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, code, words",
    [
        (["probe", "--gpu", "a100-80gb:2000"], ExitCode.USAGE, "from 1 to 128"),
        (["probe", "--gpu", "a100-80gb:100000"], ExitCode.USAGE, "GPUs per node"),
        (["probe", "--gpu", "a100-80gb:²"], ExitCode.USAGE, "bad GPU count"),
        (["recommend", "--model", "gpt2", "--global-batch-size", "1000000000000000"], ExitCode.USAGE, "<= 16777216"),
        (["recommend", "--model", "gpt2", "--nodes", "100000"], ExitCode.USAGE, "--nodes must be <= 16384"),
        (
            ["recommend", "--model", "gpt2", "--gpu", "a100-80gb:2", "--nodes", "2", "--inter-node-gbps", "nan"],
            ExitCode.USAGE,
            "--inter-node-gbps",
        ),
        (
            ["recommend", "--model", "gpt2", "--gpu", "a100-80gb:2", "--nodes", "2", "--inter-node-gbps", "inf"],
            ExitCode.USAGE,
            "finite",
        ),
        (["recommend", "--model", "gpt2", "--inter-node-gbps", "-inf"], ExitCode.USAGE, "finite"),
        (["validate", "--model", "gpt2", "--memory-limit", "-5GiB"], ExitCode.USAGE, "more than 0 bytes"),
        (["validate", "--model", "gpt2", "--max-trials", "0"], ExitCode.USAGE, "--max-trials must be > 0"),
        (
            [
                "validate",
                "--model",
                "gpt2",
                "--global-batch-size",
                "4",
                "--micro-batch-size",
                "3",
                "--gradient-accumulation-steps",
                "5",
            ],
            ExitCode.USAGE,
            "not the global batch 4",
        ),
        (["estimate", "--model", "gpt2", "--micro-batch-size", "99999999999"], ExitCode.USAGE, "<= 16777216"),
        (["recommend", "--model", "a" * 5000], ExitCode.USAGE, "5000 characters"),
        (["recommend", "--model", "org/" + "a" * 300], ExitCode.MODEL_NOT_FOUND, "cannot be looked up"),
        (["recommend", "--model", "~nosuchuser-advisor/m"], ExitCode.MODEL_NOT_FOUND, "~nosuchuser-advisor/m"),
    ],
)
def test_defects_are_one_line_and_a_documented_code(argv, code, words) -> None:
    got, _, err, seconds = cli(*argv)
    assert got == code, err
    assert words in err
    assert_clean(got, err, seconds)


@pytest.mark.slow
def test_the_largest_batch_on_the_largest_cluster_is_planned_in_bounded_time() -> None:
    """The divisor search and the multiple-of-8 rule cost the batch's divisors, not the batch (it took minutes)."""
    code, _, err, seconds = cli(
        "recommend",
        "--model",
        "gpt2",
        "--gpu",
        f"h100-sxm:{MAX_GPUS_PER_NODE}",
        "--global-batch-size",
        str(MAX_GLOBAL_BATCH_SIZE),
    )
    assert code == ExitCode.OK, err
    assert seconds < SLOW_S


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"n_layer": -5}, "n_layer must be from 1"),
        ({"n_embd": 0}, "n_embd must be from 1"),
        ({"n_embd": True}, "n_embd must be a whole number, got true"),
        ({"n_embd": None}, "n_embd must be a whole number, got null"),
        ({"n_embd": 64.0}, "n_embd must be a whole number"),
        ({"n_embd": float("nan")}, "not a number"),
        ({"n_embd": float("inf")}, "not a number"),
        ({"vocab_size": -5}, "vocab_size must be from 1"),
        ({"n_embd": 65, "n_head": 2}, "n_embd 65 is not a multiple of n_head 2"),
        ({"n_layer": 10**6}, f"n_layer must be from 1 to {MAX_LAYERS}"),
        ({"architectures": [None, 5]}, "architectures must be a list of class names"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
    ],
)
def test_bad_configs_name_the_field_and_the_file(folder: Path, fields: dict, words: str) -> None:
    path = folder / "bad.json"
    path.write_text(json.dumps({**TINY, **fields}))
    code, _, err, seconds = cli("profile", "--model", str(path))
    assert code == ExitCode.BAD_CONFIG, err
    assert words in err and str(path) in err
    assert_clean(code, err, seconds)


def test_a_config_of_a_million_layers_is_refused_before_the_meta_device(folder: Path) -> None:
    path = folder / "neox.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "gpt_neox",
                "num_hidden_layers": 10**6,
                "hidden_size": 64,
                "num_attention_heads": 2,
                "intermediate_size": 128,
                "vocab_size": 100,
            }
        )
    )
    code, _, err, seconds = cli("profile", "--model", str(path))
    assert code == ExitCode.BAD_CONFIG and "num_hidden_layers" in err and seconds < 5


@pytest.mark.parametrize(
    "text",
    ['{"a":' * 100_000 + "1" + "}" * 100_000, '{"model_type": "gpt2", "x": ' + "[" * 50 + "]" * 50 + "}"],
    ids=["deep-json", "deep-config"],
)
def test_deep_nesting_is_a_bad_config_not_a_recursion_error(folder: Path, text: str) -> None:
    path = folder / "deep.json"
    path.write_text(text)
    code, _, err, seconds = cli("profile", "--model", str(path))
    assert code == ExitCode.BAD_CONFIG and "nest" in err
    assert_clean(code, err, seconds)


def test_a_config_transformers_rejects_is_a_bad_config(folder: Path) -> None:
    """transformers' own config validation (huggingface_hub's strict dataclasses raise their own error type, not a
    ValueError): MPT's attn_config.attn_pdrop typed as an int, given as 0.0."""
    path = folder / "mpt.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "mpt",
                "d_model": 64,
                "n_heads": 2,
                "n_layers": 1,
                "vocab_size": 100,
                "attn_config": {"attn_pdrop": 0.0},
            }
        )
    )
    code, _, err, seconds = cli("profile", "--model", str(path))
    assert code == ExitCode.BAD_CONFIG and "transformers rejects this 'mpt' config" in err and "attn_pdrop" in err
    assert_clean(code, err, seconds)


def test_grouped_query_heads_must_divide() -> None:
    with pytest.raises(BadConfigError, match="num_attention_heads 8 is not a multiple of num_key_value_heads 3"):
        profile_from_config(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 8,
                "num_key_value_heads": 3,
                "num_hidden_layers": 1,
                "vocab_size": 10,
            },
            "m",
        )


def test_plan_files(folder: Path) -> None:
    code, out, err, _ = cli("estimate", "--model", str(folder / "tiny.json"), "--seq-len", "32", "--json")
    assert code == 0, err
    good = {**json.loads(out), "workload": {"seq_len": 32}}
    plan, seq_len, _ = read_plan(_write(folder / "plan.json", json.dumps(good)))
    assert plan.micro_batch_size == good["plan"]["micro_batch_size"] and seq_len == 32
    zero = {**good, "plan": {**good["plan"], "micro_batch_size": 0}}
    with pytest.raises(UsageError, match=r"plan\.micro_batch_size must be from 1"):
        read_plan(_write(folder / "p0.json", json.dumps(zero)))
    (folder / "latin1.json").write_bytes(b"\xff\xfe{")
    for path, words in (
        (str(folder / "latin1.json"), "not UTF-8"),
        ("/dev/zero", "not a regular file"),
        (str(folder), "Is a directory"),
    ):
        with pytest.raises(UsageError, match=words):
            read_plan(path)


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_output_targets_are_checked_before_the_work(folder: Path) -> None:
    code, _, err, seconds = cli("validate", "--model", str(folder / "tiny.json"), "--output", "/nonexistent/dir/r.json")
    assert code == ExitCode.OUTPUT and "does not exist" in err and seconds < 5  # no trial ran
    code, _, err, _ = cli("validate", "--model", str(folder / "tiny.json"), "--output", str(folder))
    assert code == ExitCode.OUTPUT and "directory" in err
    code, _, err, _ = cli("validate", "--model", str(folder / "tiny.json"), "--output", "/dev/null")
    assert code == ExitCode.OUTPUT and "not a regular file" in err
    assert Path("/dev/null").is_char_device()


def test_emit_is_all_or_nothing(folder: Path) -> None:
    out = folder / "emit"
    (out / "launch.sh").mkdir(parents=True)
    code, _, err, _ = cli("recommend", "--model", "gpt2", "--emit", "all", "--out", str(out))
    assert code == ExitCode.OUTPUT and "launch.sh" in err
    assert sorted(p.name for p in out.iterdir()) == ["launch.sh"]  # nothing of the set written
    code, _, err, _ = cli("recommend", "--model", "gpt2", "--emit", "hf", "--out", str(folder / "tiny.json"))
    assert code == ExitCode.OUTPUT and "not a folder" in err


@pytest.mark.subprocess
def test_a_full_stdout_is_exit_7(folder: Path) -> None:
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "advisor", "profile", "--model", "gpt2", "--json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)},
        )
    assert done.returncode == ExitCode.OUTPUT, done.stderr
    assert done.stderr.strip().splitlines() == ["advisor: error: cannot write the output: No space left on device"]


def test_a_bad_hf_endpoint_port_is_unreachable_not_an_error(monkeypatch) -> None:
    from probes.hub import hub_reachable

    monkeypatch.setenv("HF_ENDPOINT", "https://huggingface.co:notaport")
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    assert hub_reachable(0.1) is False


def test_every_exit_code_is_in_the_readme_table() -> None:
    table = (ROOT / "README.md").read_text(encoding="utf-8").split("### Exit codes", 1)[1].split("\n\n", 2)[1]
    rows = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert rows == CODES


# -- property-based: hostile inputs ----------------------------------------------------------------------------

_HOSTILE_VALUES = st.one_of(
    st.integers(-10, 10),
    st.integers(10**6, 10**12),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
_SIZE_KEYS = {
    "gpt2": ("n_embd", "n_layer", "n_head", "n_inner", "vocab_size", "n_positions"),
    "bert": (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "type_vocab_size",
    ),
    "llama": (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "tie_word_embeddings",
    ),
    "t5": ("d_model", "d_kv", "num_heads", "d_ff", "num_layers", "num_decoder_layers", "vocab_size"),
    "mixtral": (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_local_experts",
        "num_experts_per_tok",
        "intermediate_size",
        "vocab_size",
    ),
}


@st.composite
def hostile_configs(draw) -> dict:
    """A config of a catalog family whose size fields are small valid values or hostile ones."""
    family = draw(st.sampled_from(sorted(_SIZE_KEYS)))
    config: dict = {"model_type": family}
    for key in _SIZE_KEYS[family]:
        if draw(st.booleans()):
            config[key] = draw(st.one_of(st.sampled_from([1, 2, 4, 8, 16, 64]), _HOSTILE_VALUES))
    if draw(st.booleans()):
        config["architectures"] = draw(st.one_of(st.lists(st.text(max_size=8), max_size=2), _HOSTILE_VALUES))
    return config


@FEW
@given(config=hostile_configs())
@example(
    config={"model_type": "llama", "tie_word_embeddings": None}
)  # a null flag reads as false (was a ValidationError)
def test_any_config_is_a_profile_or_one_bad_config_line(folder: Path, config: dict) -> None:
    """Invariants 1, 2, 3, 5: a hostile config.json profiles or is exit 4 naming a field it has."""
    path = folder / "hostile.json"
    path.write_text(json.dumps(config))
    code, out, err, seconds = cli("profile", "--model", str(path), "--json")
    assert_clean(code, err, seconds)
    assert code in (ExitCode.OK, ExitCode.BAD_CONFIG, ExitCode.USAGE), err
    if code == ExitCode.OK:
        profile = json.loads(out)
        assert profile["num_parameters"] > 0 and profile["hidden_size"] > 0 and profile["num_layers"] > 0
    elif code == ExitCode.BAD_CONFIG:
        assert str(path) in err and any(key in err for key in config), err


@FEW
@given(data=st.binary(max_size=200))
def test_any_bytes_as_config_json_are_one_line(folder: Path, data: bytes) -> None:
    """Fuzzed config.json bytes: exit 4 (or a profile, for the rare valid one), one line."""
    path = folder / "bytes.json"
    path.write_bytes(data)
    code, _, err, seconds = cli("profile", "--model", str(path))
    assert_clean(code, err, seconds)
    assert code in (ExitCode.OK, ExitCode.BAD_CONFIG)


_NUMBERS = st.sampled_from(
    [
        "0",
        "-1",
        "-5",
        "1",
        "2",
        "3",
        "8",
        "64",
        "nan",
        "inf",
        "-inf",
        "1e99",
        "²",
        "1.5",
        "99999999999999999999",
        "16777217",
        "",
        "abc",
        "-5GiB",
        "0x10",
    ]
)
_FLAGS = {
    "recommend": [
        "--seq-len",
        "--global-batch-size",
        "--nodes",
        "--inter-node-gbps",
        "--lora-rank",
        "--host-memory",
        "--gpu",
        "--method",
        "--objective",
        "--interconnect",
    ],
    "estimate": [
        "--seq-len",
        "--global-batch-size",
        "--micro-batch-size",
        "--gradient-accumulation-steps",
        "--tensor-parallel",
        "--pipeline-parallel",
        "--nodes",
        "--gpu",
        "--precision",
        "--optimizer",
        "--offload",
        "--parallelism",
    ],
    "probe": ["--gpu", "--nodes", "--interconnect", "--inter-node-gbps", "--host-memory"],
}
#: Values each flag takes (half the draws), so that the hostile ones meet plans that run, not only refusals.
_VALID = {
    "--seq-len": ["16", "32", "64"],
    "--global-batch-size": ["1", "8", "64"],
    "--nodes": ["1", "2"],
    "--inter-node-gbps": ["100", "400"],
    "--lora-rank": ["8"],
    "--host-memory": ["64GiB"],
    "--method": ["auto", "lora", "full"],
    "--objective": ["speed", "memory"],
    "--interconnect": ["pcie", "nvlink,infiniband"],
    "--micro-batch-size": ["1", "2"],
    "--gradient-accumulation-steps": ["1", "4"],
    "--tensor-parallel": ["1", "2"],
    "--pipeline-parallel": ["1"],
    "--precision": ["bf16", "fp32"],
    "--optimizer": ["adamw", "adafactor"],
    "--offload": ["none", "optimizer"],
    "--parallelism": ["ddp", "zero-2", "none"],
    "--gpu": ["a100-80gb", "a100-80gb:8", "t4:2"],
}
_GPUS = st.sampled_from(["a100-80gb", "a100-80gb:8", "t4:2", "h100-sxm:129", "nosuch", "a100-80gb:0", "a100-80gb:²"])


@st.composite
def flag_lines(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(_FLAGS)))
    argv = [command] + ([] if command == "probe" else ["--model", "TINY"])
    for flag in draw(st.lists(st.sampled_from(_FLAGS[command]), max_size=4, unique=True)):
        hostile = draw(_GPUS) if flag == "--gpu" else draw(st.one_of(_NUMBERS, st.text(max_size=4)))
        value = draw(st.sampled_from(_VALID[flag])) if draw(st.booleans()) else hostile
        argv += [flag, value]
    return argv


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=flag_lines())
def test_any_flag_combination_is_a_documented_code(folder: Path, argv: list[str]) -> None:
    """Invariants 1-4: random flags of every planning command; nothing written to the working folder."""
    argv = [str(folder / "tiny.json") if a == "TINY" else a for a in argv]
    before = set(os.listdir("."))
    code, _, err, seconds = cli(*argv)
    assert_clean(code, err, seconds)
    assert set(os.listdir(".")) == before


_PLAN_FIELDS = st.dictionaries(
    st.sampled_from(
        [
            "device",
            "precision",
            "tf32",
            "optimizer",
            "gradient_checkpointing",
            "micro_batch_size",
            "gradient_accumulation_steps",
            "parallelism",
            "num_gpus",
            "tensor_parallel",
            "lora_rank",
            "method",
            "weights_dtype",
            "cpu_processes",
            "offload",
        ]
    ),
    st.one_of(_HOSTILE_VALUES, st.sampled_from(["cpu", "cuda", "fp32", "bf16", "adamw", "none", "ddp", "full"])),
    max_size=8,
)


@FEW
@given(fields=_PLAN_FIELDS, wrap=st.sampled_from(["plan", "confirmed_plan", "other", None]))
def test_any_plan_file_is_a_plan_or_one_usage_line(folder: Path, fields: dict, wrap: str | None) -> None:
    """Invariant 6: a random ``--plan`` file (a valid plan with hostile fields over it)."""
    base = {
        "device": "cpu",
        "precision": "fp32",
        "tf32": False,
        "optimizer": "adamw",
        "gradient_checkpointing": False,
        "micro_batch_size": 1,
        "gradient_accumulation_steps": 1,
        "parallelism": "none",
        "num_gpus": 0,
    }
    document = {wrap: {**base, **fields}} if wrap else [base]
    path = _write(folder / "fuzz-plan.json", json.dumps(document))
    try:
        plan, _, _ = read_plan(path)
    except UsageError as err:
        assert "\n" not in str(err) and path in str(err)
        return
    assert plan.micro_batch_size >= 1 and plan.gradient_accumulation_steps >= 1 and plan.num_gpus >= 0


_API_KEYS = {
    "recommend": [
        "gpu",
        "nodes",
        "seq_len",
        "global_batch_size",
        "inter_node_gbps",
        "interconnect",
        "objective",
        "method",
        "lora_rank",
        "task",
        "hardware",
        "host_memory_bytes",
        "from_scratch",
    ],
    "estimate": [
        "gpu",
        "seq_len",
        "micro_batch_size",
        "gradient_accumulation_steps",
        "precision",
        "optimizer",
        "parallelism",
        "offload",
        "tensor_parallel",
        "weights_dtype",
        "tf32",
        "method",
        "hardware",
    ],
}


@pytest.mark.parametrize("model", ["0\n", "a\x1b[2Jb", "./no\rsuch/config.json", "no\u202esuch/model"])
def test_a_model_id_that_is_not_found_is_named_escaped(model: str) -> None:
    """The not-found message names the id the user gave with its control characters escaped (hypothesis found
    '0\\n' printed raw): one line, nothing a terminal acts on."""
    from advisor.core.errors import ModelNotFoundError

    with pytest.raises(ModelNotFoundError) as err:
        api.estimate(model)
    text = str(err.value)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text and "\u202e" not in text
    assert ascii(model)[1:-1] in text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gpu": "a\nb"},
        {"gpu": "h100-sxm:8\x1b[2J"},
        {"method": "lo\nra"},
        {"precision": "bf\r16"},
        {"interconnect": "infi\nniband"},
        {"optimizer": "a\u202eb"},
        {"micro_batch_size": "1\n2"},
    ],
)
def test_an_option_value_with_control_characters_is_named_escaped(kwargs: dict) -> None:
    """The API's one-line errors name a bad option value with its control characters escaped, as the CLI prints
    every error line (options' messages, the GPU catalog's, --interconnect's)."""
    from advisor.core.errors import UsageError

    with pytest.raises(UsageError) as err:
        api.estimate("gpt2", **kwargs)
    assert not any(c in str(err.value) for c in "\n\r\x1b\u202e"), str(err.value)


@FEW
@given(
    data=st.data(),
    function=st.sampled_from(sorted(_API_KEYS)),
    model=st.one_of(st.just("TINY"), st.none(), st.integers(), st.text(max_size=3)),
)
def test_the_api_raises_only_advisor_errors(folder: Path, data, function: str, model) -> None:
    """Invariant 7: ``recommend`` and ``estimate`` with random keyword values of any type."""
    words = st.sampled_from(["bf16", "fp16", "zero-3", "ddp", "optimizer", "lora", "qlora", "all-linear"])
    kwargs = data.draw(
        st.dictionaries(st.sampled_from(_API_KEYS[function]), st.one_of(_HOSTILE_VALUES, _GPUS, words), max_size=4)
    )
    model = str(folder / "tiny.json") if model == "TINY" else model
    try:
        getattr(api, function)(model, **kwargs)
    except AdvisorError as err:
        assert "\n" not in str(err).split(" (")[0]


@st.composite
def valid_configs(draw) -> dict:
    """A small valid decoder config (gpt2 or llama layout)."""
    heads = draw(st.sampled_from([1, 2, 4]))
    width = heads * draw(st.sampled_from([8, 16, 32]))
    layers, vocab = draw(st.integers(1, 4)), draw(st.integers(16, 512))
    if draw(st.booleans()):
        return {
            "model_type": "gpt2",
            "n_embd": width,
            "n_head": heads,
            "n_layer": layers,
            "vocab_size": vocab,
            "n_positions": 256,
        }
    kv = draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0]))
    return {
        "model_type": "llama",
        "hidden_size": width,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "num_hidden_layers": layers,
        "intermediate_size": 2 * width,
        "vocab_size": vocab,
        "max_position_embeddings": 256,
    }


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=valid_configs(), gbs=st.integers(1, 4096), gpus=st.sampled_from(["a100-80gb", "a100-80gb:8", "t4:2"]))
def test_valid_plans_keep_the_global_batch_and_round_trip(config: dict, gbs: int, gpus: str) -> None:
    """Invariants 8 and 10: micro × accumulation × data-parallel = global batch; JSON round-trips; deterministic."""
    from advisor.engine.recommendation import Recommendation

    profile = profile_from_config(config, "m")
    count = int(gpus.partition(":")[2] or 1)
    gbs = gbs * count  # divisible by the GPUs
    try:
        rec = api.recommend(profile, gpu=gpus, seq_len=64, global_batch_size=gbs)
    except AdvisorError as err:
        assert err.exit_code == ExitCode.NO_FIT
        return
    plan = rec.plan
    assert plan.micro_batch_size * plan.gradient_accumulation_steps * plan.data_parallel_size == gbs
    text = rec.model_dump_json()
    assert Recommendation.model_validate_json(text).model_dump_json() == text
    assert api.recommend(profile, gpu=gpus, seq_len=64, global_batch_size=gbs).model_dump_json() == text


@FEW
@given(config=valid_configs(), micro=st.integers(1, 64), seq=st.sampled_from([16, 32, 64, 128]))
def test_memory_grows_with_the_micro_batch_and_the_sequence(config: dict, micro: int, seq: int) -> None:
    """Invariant 9: the peak never falls when the micro-batch or the sequence grows."""
    profile = profile_from_config(config, "m")

    def peak(m: int, s: int) -> int:
        return api.estimate(profile, gpu="a100-80gb", micro_batch_size=m, seq_len=s).memory.peak_bytes

    base = peak(micro, seq)
    assert peak(micro + 1, seq) >= base
    assert peak(micro, seq * 2) >= base


@settings(max_examples=200, deadline=None)
@given(n=st.one_of(st.integers(1, 5000), st.integers(1, MAX_GLOBAL_BATCH_SIZE)))
def test_divisors_are_exact_and_cheap(n: int) -> None:
    """Invariant 11: every divisor, ascending, in well under a millisecond per call up to the largest batch."""
    start = time.perf_counter()
    found = divisors(n)
    assert time.perf_counter() - start < 0.05
    assert found == sorted(set(found)) and found[0] == 1 and found[-1] == n
    assert all(n % d == 0 for d in found)
    assert len(found) == sum(2 if d * d != n else 1 for d in range(1, math.isqrt(n) + 1) if n % d == 0)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["dir", "fifo", "file", "missing"]), target=st.sampled_from(["hf", "torchrun", "all"]))
def test_emit_never_replaces_what_is_not_a_file(folder: Path, kind: str, target: str) -> None:
    """Invariant 12: an --emit file name taken by a directory or a FIFO is exit 7 and left as it was."""
    import shutil
    import stat

    out = folder / "emit-prop"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    name = "training_args.json" if target in ("hf", "all") else "launch.sh"
    path = out / name
    if kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "file":
        path.write_text("old")
    code, _, err, seconds = cli(
        "recommend", "--model", "gpt2", "--gpu", "a100-80gb", "--emit", target, "--out", str(out)
    )
    assert_clean(code, err, seconds)
    if kind in ("dir", "fifo"):
        assert code == ExitCode.OUTPUT
        assert path.is_dir() if kind == "dir" else stat.S_ISFIFO(path.stat().st_mode)
        assert [p.name for p in out.iterdir()] == [name]
    else:
        assert code == ExitCode.OK and path.read_text() != "old"
        assert not [p for p in out.iterdir() if p.name.endswith((".tmp", ".old"))]


# -- the Hub's deadline and signals ----------------------------------------------------------------------------


@pytest.mark.subprocess  # huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE when imported: a fresh process
def test_a_hub_that_never_answers_costs_the_deadline_not_minutes(tmp_path: Path) -> None:
    """A server that accepts the connection and never answers: the look-up gives up at --hub-timeout."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []

    def hold() -> None:  # accept, never answer
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=hold, daemon=True).start()
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy")}
    env.update(
        HF_ENDPOINT=f"http://127.0.0.1:{server.getsockname()[1]}", HF_HUB_CACHE=str(tmp_path), PYTHONPATH=str(ROOT)
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "advisor", "profile", "--model", "gpt2", "--hub-timeout", "1", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert time.perf_counter() - start < 15  # start-up included; minutes before
    assert done.returncode == 0, done.stderr
    profile = json.loads(done.stdout)
    assert profile["source"] == "catalog" and any("did not answer within 1 s" in n for n in profile["notes"])
    assert "Retrying" not in done.stderr and "Warning" not in done.stderr
    server.close()


def test_hub_timeout_flag_is_checked() -> None:
    for value, words in (("nan", "finite"), ("0", "> 0"), ("601", "<= 600")):
        code, _, err, _ = cli("profile", "--model", "gpt2", "--hub-timeout", value)
        assert code == ExitCode.USAGE and "--hub-timeout" in err and words in err


@pytest.mark.subprocess
def test_sigterm_stops_validate_like_ctrl_c(tmp_path: Path) -> None:
    """SIGTERM: the step finishes, the partial report is printed and written, exit 130 (it was -15, nothing)."""
    import signal
    import subprocess
    import sys

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    report = tmp_path / "partial.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advisor",
            "validate",
            "--model",
            str(config),
            "--seq-len",
            "32",
            "--steps",
            "10000",
            "--warmup",
            "1",
            "--output",
            str(report),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)},
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait for the first timed step
        if " step " in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert json.loads(out)["interrupted"] is True and json.loads(report.read_text())["interrupted"] is True


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_wizard_needs_a_terminal_and_a_good_model(monkeypatch) -> None:
    """Without a terminal the wizard never exited; a bad --model showed only on a tab the app did not open on."""
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO())
    code, _, err, _ = cli("tui", "--model", "gpt2")
    assert code == ExitCode.USAGE and "needs a terminal" in err
    monkeypatch.setattr(sys, "stdin", _Terminal())
    out, err_io = _Terminal(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err_io):
        code = run(["tui", "--model", "/nonexistent/config.json"])
    assert code == ExitCode.MODEL_NOT_FOUND and len(err_io.getvalue().splitlines()) == 1
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err_io):
        assert run(["tui", "--seq-len", "0"]) == ExitCode.USAGE


@pytest.mark.subprocess
def test_a_second_sigterm_ends_torchrun_and_its_ranks(tmp_path: Path) -> None:
    """validate --nproc 2, SIGTERM twice: exit 130, no rank left running, no /tmp/advisor-trial-* left behind."""
    import glob
    import signal
    import subprocess
    import sys

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    own_tmp = tmp_path / "tmp"  # the run's own temporary folder: no other process's trial folder is counted
    own_tmp.mkdir()
    trials = os.path.join(own_tmp, "advisor-trial-*")
    before = set(glob.glob(trials))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advisor",
            "validate",
            "--model",
            str(config),
            "--seq-len",
            "32",
            "--nproc",
            "2",
            "--steps",
            "10000",
            "--warmup",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "TMPDIR": str(own_tmp)},
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if " step " in line:
            break
    mine = set(glob.glob(trials)) - before
    assert mine, "no trial folder made under the run's TMPDIR"
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    assert not [path for path in mine if os.path.exists(path)]
    workers = subprocess.run(["pgrep", "-f", f"dist_worker {next(iter(mine), 'none')}"], capture_output=True, text=True)
    assert workers.stdout.strip() == ""


def test_the_largest_board_is_probed_fast_and_its_links_in_one_line() -> None:
    code, out, err, seconds = cli("probe", "--gpu", f"a100-80gb:{MAX_GPUS_PER_NODE}")
    assert code == ExitCode.OK, err
    assert f"every pair of the {MAX_GPUS_PER_NODE} GPUs is NV12" in out and seconds < SLOW_S
