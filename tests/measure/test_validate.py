"""The validator: real trial steps on this machine (the CPU here; CUDA where a GPU exists), and
its fault paths: out of memory, non-finite loss, missing bitsandbytes, Ctrl-C."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from advisor.app import api  # noqa: E402
from advisor.app.files import write_atomic  # noqa: E402
from advisor.measure.trial import StepUpdate  # noqa: E402
from advisor.measure.session import Session, larger_micro_batch, smaller_micro_batch  # noqa: E402
from advisor.measure.validation import ValidationReport, baseline_plan  # noqa: E402
from advisor.core.errors import ExitCode, OutputError, UsageError  # noqa: E402
from probes.hardware import HardwareProfile, read_host  # noqa: E402
from rules import Plan  # noqa: E402

from conftest import facts as make_facts  # noqa: E402
from cli_runner import ENV, ROOT, advisor  # noqa: E402
from helpers import TINY_GPT2, cpu_plan  # noqa: E402

TINY = TINY_GPT2
CPU = HardwareProfile(source="none", host=read_host())


@pytest.fixture
def tiny(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


_plan = cpu_plan


def test_cpu_trial_confirms_the_plan_and_measures_it(tiny) -> None:
    report = api.validate(tiny, seq_len=64, global_batch_size=8, steps=3, hardware=CPU)
    assert report.verdict == "confirmed" and not report.interrupted
    (trial,) = report.trials
    m = trial.measured
    assert trial.status == "ok" and trial.role == "plan" and report.confirmed_plan == trial.plan
    assert m.timed_steps == 3 and len(m.losses) == 5 and m.losses_finite
    assert all(math.isfinite(v) and 5 < v < 9 for v in m.losses)  # ln(1000) = 6.9 for random weights
    assert m.step_time_s > 0 and m.step_time_spread_s >= 0
    assert m.samples_per_s == pytest.approx(8 / m.step_time_s)
    assert m.tokens_per_s == pytest.approx(m.samples_per_s * 64)
    assert 0 < m.mfu < 1
    # the live-tensor peak is counted like the simulator counts: the analytic model is within 25 %
    assert abs(trial.error.peak_bytes) < 0.25, trial.error
    assert m.device_bytes > m.peak_bytes  # the process's peak RSS holds torch itself too
    assert report.device.type == "cpu" and report.device.torch_version == torch.__version__
    ValidationReport.model_validate_json(report.model_dump_json())  # the JSON round-trips
    # the trial is in the local store of runs (ADVISOR_HOME: the test's empty folder)
    from advisor.measure import run_store

    (stored,) = run_store.read().records
    assert stored["source"] == run_store.SOURCE_VALIDATE and stored["device"]["type"] == "cpu"
    assert stored["measured"]["step_time_s"] == m.step_time_s and stored["plan"] == trial.plan.model_dump(mode="json")
    assert stored["predicted"]["step_time_s"] == trial.predicted.speed.step_time_s


def test_gpt2_cpu_plan_runs_end_to_end() -> None:
    report = api.validate("gpt2", seq_len=32, global_batch_size=2, steps=1, hardware=CPU)
    assert report.verdict == "confirmed", report.trials[-1].message
    assert report.trials[0].measured.peak_bytes > 124_439_808 * 16  # weights, gradients and AdamW's two states


def test_memory_limit_forces_oom_and_a_smaller_micro_batch_keeps_the_global_batch(tiny) -> None:
    facts = api.make_facts(tiny, seq_len=128, global_batch_size=16, hardware=CPU)
    from advisor.engine.candidates import evaluate

    peak = {
        mb: evaluate(facts, _plan(micro_batch_size=mb, gradient_accumulation_steps=16 // mb)).memory.peak_bytes
        for mb in (16, 8)
    }
    limit = (peak[16] + peak[8]) // 2
    report = api.validate(
        tiny,
        seq_len=128,
        global_batch_size=16,
        micro_batch_size=16,
        precision="fp32",
        steps=2,
        memory_limit_bytes=limit,
        hardware=CPU,
    )
    first, last = report.trials[0], report.trials[-1]
    assert first.status == "oom" and "limit" in first.message
    assert last.status == "ok" and last.role == "smaller-micro-batch"
    assert report.verdict == "corrected"
    assert report.confirmed_plan.micro_batch_size == 8 and report.confirmed_plan.gradient_accumulation_steps == 2
    assert report.confirmed_plan.global_batch_size == 16
    assert report.device.memory_limit_bytes == limit


def test_injected_cuda_oom_is_caught_by_type(tiny, monkeypatch) -> None:
    """torch.cuda.OutOfMemoryError from the model (as on a GPU) is an 'oom' status, never a crash."""
    import advisor.measure.trial as trial_module

    real_build = trial_module.build_model

    def build(model, config, weights=None, **kwargs):
        net = real_build(model, config, weights=weights, **kwargs)

        def too_big(module, args, kwargs):
            if kwargs["input_ids"].shape[0] > 2:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

        net.register_forward_pre_hook(too_big, with_kwargs=True)
        return net

    monkeypatch.setattr(trial_module, "build_model", build)
    report = api.validate(
        tiny, seq_len=32, global_batch_size=8, micro_batch_size=8, precision="fp32", steps=1, hardware=CPU
    )
    assert [t.status for t in report.trials] == ["oom", "oom", "ok"]
    assert [t.plan.micro_batch_size for t in report.trials] == [8, 4, 2]
    assert report.confirmed_plan.gradient_accumulation_steps == 4 and report.verdict == "corrected"


def test_a_trial_whose_device_cannot_be_read_afterwards_is_an_error_not_a_crash(tiny, monkeypatch) -> None:
    """The first H100 run (2026-11-27): Liger's RMSNorm under torch.compile hit an illegal memory access; the trial
    was caught, then reading the device's peaks raised the same sticky CUDA error and ended validate with a
    traceback. Now the trial is an 'error' that says so."""
    import advisor.measure.trial as trial_module

    sticky = "CUDA error: an illegal memory access was encountered"

    def build(*args, **kwargs):
        raise RuntimeError(sticky)

    def finish(self, outcome):
        raise RuntimeError(sticky)  # torch.AcceleratorError on a GPU, a RuntimeError

    monkeypatch.setattr(trial_module, "build_model", build)
    monkeypatch.setattr(trial_module.TrialMemory, "finish", finish)
    report = api.validate(
        tiny, seq_len=32, global_batch_size=8, micro_batch_size=8, precision="fp32", steps=1, hardware=CPU
    )
    first = report.trials[0]
    assert first.status == "error" and sticky in first.message and "could not be read" in first.message
    assert report.verdict != "confirmed"


def test_oom_at_micro_batch_one_tries_checkpointing_then_fails(tiny) -> None:
    report = api.validate(
        tiny,
        seq_len=32,
        global_batch_size=2,
        micro_batch_size=2,
        precision="fp32",
        steps=1,
        memory_limit_bytes=1024,
        hardware=CPU,
    )
    assert [t.role for t in report.trials] == ["plan", "smaller-micro-batch", "checkpointing"]
    assert all(t.status == "oom" for t in report.trials)
    assert report.verdict == "failed" and report.confirmed_plan is None


def test_nonfinite_loss_is_reported(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "initializer_range": 1e30}))  # logits overflow fp32
    report = api.validate(str(path), seq_len=32, global_batch_size=2, precision="fp32", steps=2, hardware=CPU)
    (trial,) = report.trials
    assert trial.status == "nonfinite" and not trial.measured.losses_finite
    assert report.verdict == "failed"


def test_nonfinite_under_fp16_retries_bf16_where_the_gpu_has_it() -> None:
    def correction(hw: str):
        f = make_facts(hw, seq_len=128, global_batch_size=8)
        session = Session(f, api_runtime(), 1, 1, 6, None, None, threading.Event(), None)
        plan = _plan(device="cuda", precision="fp16", num_gpus=1)
        from advisor.engine.candidates import evaluate
        from advisor.measure.report_models import Predicted, RuntimeSettings, Trial

        c = evaluate(f, plan)
        trial = Trial(
            role="plan",
            reason="",
            plan=plan,
            runtime=RuntimeSettings(),
            status="nonfinite",
            predicted=Predicted(memory=c.memory, speed=c.speed),
            wall_s=0.0,
        )
        return session.correction(trial), session.warnings

    nxt, _ = correction("a100-80gb")
    assert nxt[0] == "bf16" and nxt[2].precision == "bf16"
    nxt, warnings = correction("v100-16gb")  # no bf16 before Ampere: report, no retry
    assert nxt is None and "no bf16" in warnings[0]


def api_runtime():
    from advisor.measure.validation import RuntimeSettings

    return RuntimeSettings()


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed here"
)
def test_missing_bitsandbytes_validates_the_nearest_plan_without_it(tiny) -> None:
    report = api.validate(tiny, seq_len=32, global_batch_size=4, optimizer="adamw-8bit", steps=1, hardware=CPU)
    assert any("bitsandbytes" in w and "pip install bitsandbytes" in w for w in report.warnings)
    assert report.trials[0].plan.optimizer in ("adamw", "adafactor")
    assert report.verdict == "corrected"


def test_stop_event_ends_at_a_step_boundary_with_a_partial_report(tiny) -> None:
    stop = threading.Event()
    seen: list[int] = []

    def progress(event) -> None:
        if isinstance(event, StepUpdate):
            seen.append(event.step)
            if event.step == 3:
                stop.set()

    report = api.validate(
        tiny, seq_len=32, global_batch_size=4, steps=1000, hardware=CPU, progress=progress, stop=stop, compare=True
    )
    assert report.interrupted and report.verdict == "incomplete"
    (trial,) = report.trials  # neither a correction nor the baseline after a stop
    assert trial.status == "interrupted" and len(trial.measured.losses) == 3 and seen == [1, 2, 3]
    assert trial.measured.timed_steps == 1


def test_compare_runs_the_baseline(tiny) -> None:
    report = api.validate(tiny, seq_len=64, global_batch_size=8, precision="bf16", steps=2, compare=True, hardware=CPU)
    c = report.comparison
    assert c is not None and not c.same_as_plan and c.baseline_status == "ok"
    assert c.baseline_plan.precision == "fp32" and c.baseline_plan.global_batch_size == 8
    assert c.speedup > 0 and c.memory_saved_bytes is not None
    assert report.trials[-1].role == "baseline"


def test_larger_micro_batch_is_tried_when_memory_leaves_room(tiny) -> None:
    report = api.validate(
        tiny, seq_len=32, global_batch_size=8, micro_batch_size=2, precision="fp32", steps=2, hardware=CPU
    )
    assert [t.role for t in report.trials] == ["plan", "larger-micro-batch"]
    assert report.trials[1].plan.micro_batch_size == 4 and report.trials[1].plan.gradient_accumulation_steps == 2
    kept = report.confirmed_plan.micro_batch_size
    faster = report.trials[1].measured.tokens_per_s > report.trials[0].measured.tokens_per_s * 1.02
    assert kept == (4 if faster else 2)
    assert report.verdict == ("corrected" if faster else "confirmed")


def test_micro_batch_steps_keep_the_global_batch() -> None:
    p = _plan(micro_batch_size=12, gradient_accumulation_steps=2)
    assert smaller_micro_batch(p).micro_batch_size == 6 and smaller_micro_batch(p).gradient_accumulation_steps == 4
    assert smaller_micro_batch(_plan(micro_batch_size=1, gradient_accumulation_steps=8)) is None
    assert larger_micro_batch(p).micro_batch_size == 24 and larger_micro_batch(p).gradient_accumulation_steps == 1
    assert larger_micro_batch(_plan(micro_batch_size=8)) is None
    base = baseline_plan(
        p.model_copy(update={"precision": "bf16", "optimizer": "adafactor", "gradient_checkpointing": True})
    )
    assert (base.precision, base.optimizer, base.gradient_checkpointing, base.global_batch_size) == (
        "fp32",
        "adamw",
        False,
        24,
    )


def test_a_plan_for_another_device_is_refused(tiny) -> None:
    with pytest.raises(UsageError, match="no CUDA device here"):
        api.validate(tiny, plan=_plan(device="cuda", num_gpus=1), hardware=CPU)
    with pytest.raises(UsageError, match="uses 2 GPUs, this machine has 0"):
        api.validate(tiny, plan=_plan(device="cuda", num_gpus=2, parallelism="ddp"), hardware=CPU)
    with pytest.raises(UsageError, match="needs several model replicas"):
        api.validate(tiny, plan=_plan(parallelism="ddp"), hardware=CPU)
    with pytest.raises(UsageError, match="fp16"):
        api.validate(tiny, precision="fp16", hardware=CPU)


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``advisor ARGS`` in this interpreter (tests/cli_runner.py), the trials included."""
    return advisor(*args)


def test_cli_validates_a_recommend_json_plan_and_writes_the_output(tiny, tmp_path) -> None:
    rec = _cli("recommend", "--model", tiny, "--seq-len", "32", "--global-batch-size", "4", "--json")
    assert rec.returncode == 0, rec.stderr
    plan_file = tmp_path / "rec.json"
    plan_file.write_text(rec.stdout)
    out = tmp_path / "report.json"
    res = _cli("validate", "--model", tiny, "--plan", str(plan_file), "--steps", "2", "--output", str(out), "--json")
    assert res.returncode == 0, res.stderr
    report = ValidationReport.model_validate_json(res.stdout)
    assert report.trials[0].plan == Plan.model_validate(json.loads(rec.stdout)["plan"])
    assert report.workload.seq_len == 32  # from the plan file
    assert json.loads(out.read_text()) == json.loads(res.stdout)
    assert "advisor: trial 1" in res.stderr and "advisor: trial 1" not in res.stdout
    assert "was made for" not in res.stderr and not any("was made for" in w for w in report.warnings)
    table = _cli("validate", "--model", str(Path(tiny).parent), "--plan", str(plan_file), "--steps", "1")
    assert table.returncode == 0 and "Verdict: confirmed" in table.stdout
    assert "was made for" not in table.stderr  # the folder of the same config.json: the same model


def test_cli_says_when_the_plan_file_was_made_for_another_model(tiny, tmp_path) -> None:
    """A plan sized for one model and tried on another: said on stderr before the trials and first in the report's
    warnings (the trials still run: a fine-tuned checkpoint of the same architecture is a fair reuse)."""
    rec = _cli("recommend", "--model", tiny, "--seq-len", "32", "--global-batch-size", "4", "--json")
    assert rec.returncode == 0, rec.stderr
    plan_file = tmp_path / "rec.json"
    plan_file.write_text(rec.stdout)
    other = tmp_path / "other" / "config.json"
    other.parent.mkdir()
    other.write_text(json.dumps({**TINY, "n_layer": 1}))
    res = _cli("validate", "--model", str(other), "--plan", str(plan_file), "--steps", "1", "--json")
    assert res.returncode == 0, res.stderr
    said = f"--plan {plan_file} was made for {tiny}, not {other}"
    assert f"advisor: {said}" in res.stderr
    assert ValidationReport.model_validate_json(res.stdout).warnings[0].startswith(said)


def test_cli_nonfinite_exits_with_validation_failed(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "initializer_range": 1e30}))
    res = _cli(
        "validate",
        "--model",
        str(path),
        "--seq-len",
        "32",
        "--global-batch-size",
        "2",
        "--precision",
        "fp32",
        "--steps",
        "1",
        "--json",
    )
    assert res.returncode == ExitCode.VALIDATION_FAILED
    assert json.loads(res.stdout)["trials"][0]["status"] == "nonfinite"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--memory-limit", "lots"], "is not a size"),
        (["--plan", "/nonexistent/rec.json"], "cannot read --plan"),
        (["--steps", "x"], "not a whole number"),
        (["--nproc", "0"], "--nproc must be > 0"),
    ],
)
def test_cli_bad_validate_input_is_one_line(tiny, args, needle) -> None:
    res = _cli("validate", "--model", tiny, *args)
    assert res.returncode == ExitCode.USAGE and needle in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_cli_plan_file_that_is_not_a_plan(tiny, tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"plan": {"precision": "fp8"}}')
    res = _cli("validate", "--model", tiny, "--plan", str(bad))
    assert res.returncode == ExitCode.USAGE and "--plan" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.subprocess
def test_ctrl_c_stops_at_a_step_boundary_writes_the_partial_report_and_exits_130(tiny, tmp_path) -> None:
    out = tmp_path / "partial.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advisor",
            "validate",
            "--model",
            tiny,
            "--seq-len",
            "32",
            "--global-batch-size",
            "4",
            "--steps",
            "100000",
            "--output",
            str(out),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if "step 3/" in line:
            break
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, "".join(lines) + stderr
    report = ValidationReport.model_validate_json(stdout)
    assert report.interrupted and report.trials[0].status == "interrupted"
    assert len(report.trials[0].measured.losses) >= 3
    assert json.loads(out.read_text()) == json.loads(stdout)
    assert "Traceback" not in stderr


def test_write_atomic_replaces_whole_files_or_nothing(tmp_path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    write_atomic(target, "new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["r.json"]
    with pytest.raises(OutputError, match="does not exist"):  # exit 7: an output that cannot be written
        write_atomic(tmp_path / "missing" / "r.json", "x")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_trial_measures_with_the_caching_allocator() -> None:
    report = api.validate("gpt2", seq_len=256, global_batch_size=16, steps=3)
    trial = report.trials[0]
    assert trial.status == "ok" and trial.plan.device == "cuda"
    m = trial.measured
    assert m.reserved_bytes >= m.peak_bytes > 124_439_808 * 12
    assert abs(trial.error.peak_bytes) < 0.25


def test_validate_is_in_the_python_api() -> None:
    import advisor

    assert advisor.validate is api.validate
    assert Path(ROOT / "advisor" / "measure" / "validation.py").exists()


def test_local_weights_are_used_when_the_folder_has_them(tmp_path) -> None:
    """A folder with config.json and model.safetensors trains its own weights (never downloads)."""
    import transformers

    from advisor.measure.trainable import local_weights_dir
    from probes.model import profile_model

    config = transformers.GPT2Config(
        **{k: v for k, v in TINY.items() if k not in ("model_type", "architectures")}, architectures=["GPT2LMHeadModel"]
    )
    net = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()  # zero weights: uniform logits, so the first loss is exactly ln(vocab)
    net.save_pretrained(tmp_path)
    assert local_weights_dir(profile_model(str(tmp_path))) == tmp_path
    report = api.validate(str(tmp_path), seq_len=32, global_batch_size=2, precision="fp32", steps=1, hardware=CPU)
    assert report.trials[0].measured.losses[0] == pytest.approx(math.log(1000), abs=1e-4)


@pytest.mark.subprocess  # torchrun and its ranks
@pytest.mark.parametrize("parallelism", ["ddp", "zero-3"])
def test_two_process_cpu_trial_through_torchrun_and_gloo(tiny, parallelism) -> None:
    """A distributed trial: torchrun starts 2 ranks (gloo), DDP or FSDP (ZeRO-3's counterpart)."""
    report = api.validate(
        tiny, seq_len=32, global_batch_size=8, nproc=2, parallelism=parallelism, steps=2, hardware=CPU
    )
    (trial,) = report.trials
    assert trial.status == "ok", trial.message
    plan, m = trial.plan, trial.measured
    assert (plan.parallelism, plan.data_parallel_size, plan.global_batch_size) == (parallelism, 2, 8)
    assert [r.rank for r in m.ranks] == [0, 1] and all(r.status == "ok" and r.peak_bytes > 0 for r in m.ranks)
    assert m.peak_bytes == max(r.peak_bytes for r in m.ranks)
    assert m.sync_share is not None and 0 <= m.sync_share < 1
    assert len(m.losses) == 4 and m.losses_finite
    assert report.verdict == "confirmed"


@pytest.mark.subprocess  # torchrun and its ranks
def test_distributed_trial_stops_together_and_a_failed_rank_tears_the_run_down(tiny) -> None:
    stop = threading.Event()

    def progress(event) -> None:
        if isinstance(event, StepUpdate) and event.step == 3:
            stop.set()

    report = api.validate(
        tiny, seq_len=32, global_batch_size=4, nproc=2, steps=100000, hardware=CPU, progress=progress, stop=stop
    )
    trial = report.trials[0]
    assert report.interrupted and trial.status == "interrupted"
    assert [r.status for r in trial.measured.ranks] == ["interrupted", "interrupted"]  # the same step on both
    start = time.monotonic()
    failed = api.validate(
        tiny, seq_len=32, global_batch_size=4, nproc=2, steps=2, hardware=CPU, memory_limit_bytes=1024, max_trials=1
    )
    assert failed.trials[0].status == "oom" and failed.verdict == "failed"
    assert time.monotonic() - start < 120  # no rank left waiting in a collective


def test_distributed_plans_this_machine_cannot_run_are_refused(tiny) -> None:
    with pytest.raises(UsageError, match="--nproc is for CPU"):
        api.validate(tiny, nproc=2, hardware=make_facts("a100-80gb").hardware)
    with pytest.raises(UsageError, match="without offload"):
        api.validate(tiny, plan=_plan(parallelism="zero-3", offload="optimizer", cpu_processes=2), hardware=CPU)
    with pytest.raises(UsageError, match="does not split"):
        api.validate(tiny, nproc=3, global_batch_size=8, hardware=CPU)
    with pytest.raises(UsageError, match="shard with FSDP2.*--fsdp-version 2"):  # priced as FSDP1, trialled as FSDP2
        api.validate(tiny, plan=_plan(parallelism="fsdp-full-shard", fsdp_version=1, cpu_processes=2), hardware=CPU)


def test_model_parallel_plans_are_not_trialled(tiny) -> None:
    with pytest.raises(UsageError, match="tensor / pipeline parallel"):
        api.validate(tiny, plan=_plan(cpu_processes=2, parallelism="none", tensor_parallel=2), hardware=CPU)


def test_a_micro_batch_given_to_validate_keeps_the_global_batch_over_every_gpu() -> None:
    """On 4 GPUs a micro-batch of 4 makes the global batch 64 with 4 accumulation steps (64 / (4 × 4)), not 16:
    the data-parallel replicas count (:func:`advisor.app.plan_flags.split_batch`)."""
    facts = api.make_facts("gpt2", gpu="a100-80gb:4", global_batch_size=64)
    opts = api.parse(api._options(*api._VALIDATE), {"micro_batch_size": 4})
    plan = api._plan_to_validate(facts, opts, 1)
    assert (plan.micro_batch_size, plan.gradient_accumulation_steps, plan.data_parallel_size) == (4, 4, 4)
    assert plan.global_batch_size == 64
    with pytest.raises(UsageError, match="does not divide the global batch 64 over 4 data-parallel replicas"):
        api._plan_to_validate(facts, api.parse(api._options(*api._VALIDATE), {"micro_batch_size": 32}), 1)


def test_trials_with_a_mean_sample_length_are_compared_with_full_rows(tiny) -> None:
    """A trial runs full rows of synthetic tokens, so its prediction is for full rows, whatever
    ``--mean-sample-len`` says (the plan is still chosen for it), and the report says so."""
    report = api.validate(
        tiny,
        seq_len=64,
        global_batch_size=4,
        micro_batch_size=4,
        precision="fp32",
        steps=1,
        mean_sample_len=16,
        hardware=CPU,
    )
    full = api.estimate(tiny, seq_len=64, micro_batch_size=4, precision="fp32", hardware=CPU)
    padded = api.estimate(tiny, seq_len=64, micro_batch_size=4, precision="fp32", mean_sample_len=16, hardware=CPU)
    assert padded.speed.step_time_s < full.speed.step_time_s
    trial = report.trials[0]
    assert trial.plan == full.plan
    assert trial.predicted.speed.step_time_s == pytest.approx(full.speed.step_time_s)
    assert any("full 64-token rows" in w and "--mean-sample-len" in w for w in report.warnings)


def test_settings_given_with_a_plan_file_override_it(tiny) -> None:
    """``validate --plan FILE --micro-batch-size 2`` trials the file's plan at micro-batch 2 (the accumulation keeps
    its global batch); the flag was ignored. A new global batch alone keeps the file's micro-batch."""
    plan = _plan(micro_batch_size=4, gradient_accumulation_steps=1)
    report = api.validate(tiny, plan=plan, seq_len=32, micro_batch_size=2, steps=1, max_trials=1, hardware=CPU)
    tried = report.trials[0].plan
    assert (tried.micro_batch_size, tried.gradient_accumulation_steps) == (2, 2)
    opts = api.parse(api._options(*api._VALIDATE), {"global_batch_size": 16})
    assert api._with_settings(plan, opts, global_batch_size=16).gradient_accumulation_steps == 4
    with pytest.raises(UsageError, match="--micro-batch-size 3 does not divide the global batch 4"):
        api.validate(tiny, plan=plan, seq_len=32, micro_batch_size=3, hardware=CPU)


@pytest.mark.parametrize("setting, flag", [({"fp8": True}, "--no-fp8"), ({"loss_kernel": "chunked"}, "--loss-kernel")])
def test_stack_settings_trials_do_not_run_are_refused(tiny, setting, flag) -> None:
    """Trials run 16-bit linear layers and transformers' (or Liger's) loss: an fp8 or chunked-loss plan would be
    measured as another plan, so it is refused with the flag that makes it one a trial runs."""
    with pytest.raises(UsageError, match=flag):
        api.validate(tiny, plan=_plan(**setting), seq_len=32, hardware=CPU)


def test_cli_validate_takes_the_stack_flags(tiny) -> None:
    res = _cli(
        "validate",
        "--model",
        tiny,
        "--seq-len",
        "32",
        "--global-batch-size",
        "2",
        "--attention",
        "sdpa",
        "--no-torch-compile",
        "--steps",
        "1",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    assert ValidationReport.model_validate_json(res.stdout).trials[0].plan.attention == "sdpa"
