"""The command line as a user runs it: stdout for data, one stderr line per error.

The commands run in this interpreter (``tests/cli_runner.py``: the environment, working directory and captured
streams a ``python -m advisor`` subprocess has); the fast-path test starts a Python process, since which modules a
fresh interpreter imports is what it checks (marked ``subprocess``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.engine.recommendation import Recommendation
from cli_runner import ENV, ROOT, advisor
from advisor.core.errors import ExitCode


def test_recommend_gpt2_here() -> None:
    out = advisor("recommend", "--model", "gpt2", env={**ENV, "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) <= 24 and max(map(len, lines)) <= 80, out.stdout  # the plan card fits 80 x 24
    assert "plan " in out.stdout and "memory " in out.stdout and "tokens/s" in out.stdout
    full = advisor("recommend", "--model", "gpt2", "--explain")
    assert full.returncode == 0, full.stderr
    assert "Settings and why" in full.stdout and "Memory per device" in full.stdout and "[1] " in full.stdout


def test_recommend_json_follows_the_contract() -> None:
    out = advisor("recommend", "--model", "bert-large-uncased", "--gpu", "v100-16gb", "--seq-len", "512", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rec = Recommendation.model_validate(data)
    from advisor.engine.schema import SCHEMA_VERSION

    assert data["schema_version"] == SCHEMA_VERSION
    for key in ("hardware", "model", "workload", "settings", "memory", "speed", "warnings"):
        assert key in data
    for name in (
        "precision",
        "tf32",
        "micro_batch_size",
        "gradient_accumulation_steps",
        "gradient_checkpointing",
        "optimizer",
        "parallelism",
        "num_gpus",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "torch_compile",
    ):
        setting = data["settings"][name]
        assert {"value", "rule_ids", "rationale", "sources", "alternatives"} <= set(setting), name
    assert rec.settings["precision"].value == "fp16" and rec.settings["tf32"].value is False
    for key in ("peak_bytes", "device_bytes", "capacity_bytes", "fits"):
        assert key in data["memory"]
    for key in (
        "weights_bytes",
        "gradients_bytes",
        "optimizer_states_bytes",
        "activations_bytes",
        "temporary_bytes",
        "cuda_context_bytes",
    ):
        assert key in data["memory"]["components"]
    for key in ("step_time_s", "samples_per_s", "tokens_per_s", "flops_per_step", "mfu"):
        assert key in data["speed"]


def test_llama_on_a100_80gb() -> None:
    out = advisor(
        "recommend", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80gb", "--seq-len", "2048", "--json"
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)["plan"]
    assert plan["precision"] == "bf16" and plan["tf32"] is True


def test_estimate_probe_profile_rules_schema() -> None:
    est = advisor("estimate", "--model", "gpt2", "--gpu", "a100-80gb", "--micro-batch-size", "8", "--json")
    assert est.returncode == 0, est.stderr
    assert set(json.loads(est.stdout)) == {"schema_version", "plan", "memory", "speed", "warnings"}
    probe = advisor("probe", "--json")
    assert probe.returncode == 0 and "gpus" in json.loads(probe.stdout)
    listing = advisor("probe", "--gpu", "list")
    assert listing.returncode == 0 and "h100-sxm" in listing.stdout
    profile = advisor("profile", "--model", "gpt2", "--json")
    assert json.loads(profile.stdout)["num_parameters"] == 124_439_808
    rules = advisor("rules", "--json")
    assert len(json.loads(rules.stdout)) >= 30
    schema = advisor("schema")
    assert "Recommendation" in json.loads(schema.stdout)["schemas"]


def test_estimate_s_global_batch_sets_the_accumulation_over_the_data_parallel_gpus() -> None:
    """``--global-batch-size`` with a micro-batch sets the accumulation (64 / (4 × 4 GPUs) = 4), with an accumulation
    alone the micro-batch; three that disagree, or a batch the GPUs cannot split, are one line and exit 2."""

    def plan(*args: str) -> dict:
        out = advisor("estimate", "--model", "gpt2", "--gpu", "a100-80gb:4", *args, "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["plan"]

    p = plan("--global-batch-size", "64", "--micro-batch-size", "4")
    assert (p["micro_batch_size"], p["gradient_accumulation_steps"]) == (4, 4)
    p = plan("--global-batch-size", "64", "--gradient-accumulation-steps", "2")
    assert (p["micro_batch_size"], p["gradient_accumulation_steps"]) == (8, 2)
    p = plan("--global-batch-size", "64")
    assert (p["micro_batch_size"], p["gradient_accumulation_steps"]) == (1, 16)
    assert plan("--micro-batch-size", "4")["gradient_accumulation_steps"] == 1  # no global batch: as given
    for args, words in (
        (
            ("--global-batch-size", "32", "--micro-batch-size", "4", "--gradient-accumulation-steps", "4"),
            "= 64 samples, not the global batch 32",
        ),
        (("--global-batch-size", "6"), "does not split over 4 data-parallel replicas"),
        (("--global-batch-size", "64", "--micro-batch-size", "3"), "does not divide the global batch"),
    ):
        out = advisor("estimate", "--model", "gpt2", "--gpu", "a100-80gb:4", *args)
        assert out.returncode == ExitCode.USAGE and words in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_estimate_calls_a_plan_within_capacity_but_not_the_margin_tight() -> None:
    """LitGPT's Llama-2-7B LoRA on an A10G trained at 19.77 GB max_memory_allocated (litgpt config_hub README,
    ``benchmarks/published/litgpt.jsonl``): within the GPU, beyond the 10 % margin."""
    args = (
        "estimate",
        "--model",
        "meta-llama/Llama-2-7b-hf",
        "--gpu",
        "a10g",
        "--method",
        "lora",
        "--lora-rank",
        "32",
        "--lora-targets",
        "q-v",
        "--weights-dtype",
        "bf16",
        "--micro-batch-size",
        "2",
        "--seq-len",
        "512",
        "--framework",
        "litgpt",
    )
    memory = json.loads(advisor(*args, "--json").stdout)["memory"]
    assert memory["usable_bytes"] < memory["device_bytes"] <= memory["capacity_bytes"]
    assert (memory["fits"], memory["fits_capacity"], memory["verdict"]) == (False, True, "tight")
    table = advisor(*args, env={**ENV, "COLUMNS": "120"})
    assert table.returncode == 0 and "tight: validate first" in table.stdout, table.stdout


def test_profile_of_a_mixture_of_experts() -> None:
    # Mistral AI, "Mixtral of experts" (https://mistral.ai/news/mixtral-of-experts): 46.7B total, 12.9B per token
    out = advisor("profile", "--model", "mistralai/Mixtral-8x7B-v0.1", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["num_parameters"] == pytest.approx(46.7e9, rel=0.005)
    assert data["active_parameters"] == pytest.approx(12.9e9, rel=0.005)
    assert (data["num_experts"], data["experts_per_token"], data["moe_layers"]) == (8, 2, 32)
    table = advisor("profile", "--model", "mistralai/Mixtral-8x7B-v0.1")
    assert "8 routed, top-2" in table.stdout and "12,879,925,248" in table.stdout


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["recommend", "--model", "acme/nope"], ExitCode.MODEL_NOT_FOUND, "acme/nope"),
        (["recommend", "--model", "gpt2", "--gpu", "b300"], ExitCode.USAGE, "known: v100-16gb"),
        (["recommend", "--model", "gpt2", "--gpu", "h100"], ExitCode.USAGE, "did you mean h100-sxm, h100-pcie?"),
        (["recommend", "--model", "gpt2", "--seq-len", "0"], ExitCode.USAGE, "--seq-len"),
        (["recommend", "--model", "gpt2", "--seq-len", "4096"], ExitCode.USAGE, "1024 positions"),
        (["recommend", "--model", "gpt2", "--global-batch-size", "-4"], ExitCode.USAGE, "global-batch-size"),
        (["recommend", "--model", "gpt2", "--seq-len", "abc"], ExitCode.USAGE, "whole number"),
        pytest.param(
            ["recommend", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "t4", "--seq-len", "16384"],
            ExitCode.NO_FIT,
            "would fit",
            marks=pytest.mark.slow,
        ),
        (["frobnicate"], ExitCode.USAGE, "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_a_documented_code(args, code, needle) -> None:
    out = advisor(*args)
    assert out.returncode == code, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


@pytest.mark.parametrize(
    "content, code", [("{ nope", ExitCode.BAD_CONFIG), ('{"name": "a web app"}', ExitCode.BAD_CONFIG)]
)
def test_bad_config_files(tmp_path, content, code) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    out = advisor("recommend", "--model", str(path))
    assert out.returncode == code and len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_no_fit_json_goes_to_stdout() -> None:
    out = advisor("recommend", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "t4", "--seq-len", "16384", "--json")
    assert out.returncode == ExitCode.NO_FIT
    data = json.loads(out.stdout)
    assert data["fits"] is False and data["suggestions"]


FAST_PATH = """
import sys
from advisor.app.cli import run
for argv in ({argvs}):
    code = run(argv)
    assert code == 0, (argv, code)
heavy = sorted(m for m in ("torch", "transformers", "textual", "advisor.integrations") if m in sys.modules)
print("HEAVY:" + ",".join(heavy))
"""


@pytest.mark.subprocess
def test_fast_path_imports_no_torch_transformers_textual() -> None:
    argvs = (
        repr(
            [
                ["recommend", "--model", "gpt2", "--json"],
                ["recommend", "--model", "gpt2"],
                ["estimate", "--model", "gpt2", "--gpu", "t4"],
                ["profile", "--model", "bert-base-uncased"],
                ["profile", "--model", "mistralai/Mixtral-8x7B-v0.1"],
                ["profile", "--model", "Qwen/Qwen1.5-MoE-A2.7B"],
                ["probe"],
                ["probe", "--gpu", "a100-80gb:8"],
                ["recommend", "--model", "gpt2", "--explain"],
                ["compare", "--model", "gpt2", "--gpu", "t4", "--gpu", "h100-sxm:2"],
            ]
        )[1:-1]
        + ","
    )
    out = subprocess.run(
        [sys.executable, "-c", FAST_PATH.format(argvs=argvs)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "HEAVY:"


def test_estimate_says_what_the_rules_say_of_the_plan() -> None:
    """estimate prices any plan, and now also says what the rules hold against it: bf16 on a T4 (no bf16 tensor
    cores), nn.DataParallel; a tensor-parallel plan over every GPU has no data-parallel strategy to blame for idle
    GPUs; a plan the planner would choose gets only the facts' warnings. The CLI prints them after the tables."""
    from advisor.app.api import estimate

    t4 = estimate("gpt2", gpu="t4", precision="bf16")
    assert any(
        w.rule_id == "precision.no-bf16-before-ampere" and w.message.startswith("--precision bf16: ")
        for w in t4.warnings
    ), t4.warnings
    dp = estimate("gpt2", gpu="a100-80gb:4", parallelism="dp")
    assert any(w.message.startswith("--parallelism dp: nn.DataParallel") for w in dp.warnings)
    tp = estimate("meta-llama/Llama-2-7b-hf", gpu="a100-80gb:8", tensor_parallel=8)
    assert not any("idle" in w.message for w in tp.warnings)
    plain = estimate("gpt2", gpu="a100-80gb", micro_batch_size=8)
    assert not any(w.message.startswith("--") for w in plain.warnings)
    out = advisor("estimate", "--model", "gpt2", "--gpu", "t4", "--precision", "bf16")
    assert out.returncode == 0 and "! --precision bf16: NVIDIA T4" in out.stdout, out.stdout
