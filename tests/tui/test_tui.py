"""The wizard: every step driven with Textual's Pilot (asserting on the app's state and the messages
it posted), SVG snapshots at 80 x 24, and one run in a real terminal through tmux."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

pytest.importorskip("textual")

from textual import on  # noqa: E402

from wizard_kit import CPU_HW, SIZE, anyio_backend, wait_for  # noqa: E402,F401
from cli_runner import ENV, ROOT, advisor  # noqa: E402
from tui.app import AdvisorApp  # noqa: E402
from probes.gpu_catalog import catalog  # noqa: E402
from tui.messages import (
    ComparisonReady,
    Exported,
    HardwareProbed,
    ModelFailed,
    ModelResolved,
    PlanningFailed,  # noqa: E402
    RecommendationReady,
    ValidationDone,
    ValidationProgress,
    WizardMessage,
)
from tui.confirm import Confirm  # noqa: E402
from tui.steps import HardwareStep, RecommendationStep, WorkloadStep  # noqa: E402
from tui.widgets import plan_differences  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # coroutines run by anyio's plugin on asyncio; Pilot: seconds each

TINY = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_layer": 2,
    "n_embd": 128,
    "n_head": 4,
    "n_positions": 256,
    "vocab_size": 1000,
}


def _tiny_trial(app, path, steps: str) -> None:
    """The wizard's inputs for a trial of the tiny config at ``path``: 32 tokens, a global batch of 4, ``steps``."""
    app.query_one("#model-input").value = str(path)
    app.query_one("#seq-len").value = "32"
    app.query_one("#global-batch").value = "4"
    app.query_one("#trial-steps").value = steps


class RecordingApp(AdvisorApp):
    """The wizard, keeping every wizard message that reaches the app, in order (what tests assert on)."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.messages: list[WizardMessage] = []

    @on(WizardMessage)
    def _record(self, message: WizardMessage) -> None:
        self.messages.append(message)


def kinds(app: RecordingApp) -> list[type]:
    return [type(m) for m in app.messages]


async def test_opens_on_the_recommendation_when_the_options_define_the_question() -> None:
    app = RecordingApp(model="gpt2", gpu="a100-80gb", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.recommendation is not None)
        assert app.step == "recommendation"
        assert kinds(app) == [HardwareProbed, ModelResolved, RecommendationReady]
        rec = app.recommendation
        assert rec.hardware.gpu.catalog_id == "a100-80gb" and rec.plan.precision == "bf16"
        assert app.query_one(RecommendationStep).explained == "method"
        await pilot.press("down", "down")  # the highlighted row explains itself
        assert app.query_one(RecommendationStep).explained == list(rec.settings)[2]


async def test_hardware_step_shows_the_machine_and_picks_a_catalog_gpu() -> None:
    app = RecordingApp(hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: HardwareProbed in kinds(app))
        assert app.step == "hardware" and app.query_one(HardwareStep).gpu_choice() == (None, 1)
        app.query_one("#gpu-search").focus()  # the step opens on its first field, the machine / catalog choice
        await pilot.pause()
        await pilot.press(*"h100")
        options = app.query_one("#gpu-list")
        ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
        assert ids and all("h100" in i for i in ids)
        options.focus()
        options.highlighted = 0
        await pilot.press("down", "enter")  # the second match
        assert app.query_one("#gpu-search").value == ids[1]
        count = app.query_one("#gpu-count")
        count.value = "8"
        app.query_one("#nodes").value = "2"
        assert app.query_one(HardwareStep).gpu_choice() == (f"{ids[1]}:8", 2)


async def test_model_step_completes_profiles_and_shows_errors_inline() -> None:
    app = RecordingApp(hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+n")
        assert app.step == "model"
        await pilot.click("#model-input")
        await pilot.press(*"gpt2-me")
        await pilot.press("right")  # accept the catalog suggestion
        assert app.query_one("#model-input").value == "gpt2-medium"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.profile is not None)
        assert app.profile.num_parameters == 354_823_168 and ModelResolved in kinds(app)
        app.query_one("#model-input").value = "no-such-org/no-such-model"
        await pilot.press("enter")
        await wait_for(pilot, lambda: ModelFailed in kinds(app))
        failed = app.messages[-1]
        assert "no-such-org/no-such-model" in failed.error and app.profile is None
        assert app.query_one("#model-profile").has_class("error")
        assert app.is_running  # an error is a line on the screen, never a crash


async def test_workload_step_feeds_the_planner() -> None:
    app = RecordingApp(gpu="a100-80gb", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#model-input").value = "gpt2"
        app.query_one("TabbedContent").active = "workload"
        await pilot.pause()
        app.query_one("#seq-len").value = "512"
        app.query_one("#global-batch").value = "32"
        await pilot.click("#objective-memory")
        assert "bitsandbytes" in str(app.query_one("#packages").render())
        assert app.query_one(WorkloadStep).workload_choice() == {
            "seq_len": 512,
            "global_batch_size": 32,
            "task": None,
            "objective": "memory",
            "method": "auto",
        }
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.recommendation is not None)
        rec = app.recommendation
        assert app.step == "recommendation"
        assert (rec.workload.seq_len, rec.workload.global_batch_size, rec.workload.objective) == (512, 32, "memory")
        fastest = min(p.device_bytes for p in rec.alternative_plans)
        assert rec.memory.device_bytes <= fastest  # least memory first


async def test_choosing_lora_in_the_workload_step_plans_lora() -> None:
    """The method list offers recommend's choices (auto, full, lora, qlora); picking LoRA with the keyboard
    plans LoRA adapters."""
    from advisor.app.options import METHOD_CHOICES

    app = RecordingApp(gpu="a100-80gb", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#model-input").value = "meta-llama/Llama-2-7b-hf"
        app.query_one("TabbedContent").active = "workload"
        await pilot.pause()
        select = app.query_one("#method")
        assert [value for _, value in select._options] == list(METHOD_CHOICES)
        assert app.query_one(WorkloadStep).method_choice() == "auto"
        select.focus()
        await pilot.press("enter")  # open the list; under load its overlay shows a frame or more later
        await wait_for(pilot, lambda: select.expanded)
        await pilot.press("down", "down", "enter")  # auto → full → lora
        await wait_for(pilot, lambda: not select.expanded)
        assert app.query_one(WorkloadStep).method_choice() == "lora"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.recommendation is not None)
        rec = app.recommendation
        assert rec.plan.method == "lora" and rec.workload.method == "lora"
        assert rec.settings["method"].value == "lora"


async def test_method_option_of_advisor_tui_opens_on_its_plan() -> None:
    app = RecordingApp(model="meta-llama/Llama-2-7b-hf", gpu="a100-80gb", method="qlora", lora_rank=8, hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.recommendation is not None)
        assert app.query_one(WorkloadStep).method_choice() == "qlora"
        assert (app.recommendation.plan.method, app.recommendation.plan.lora_rank) == ("qlora", 8)


async def test_full_fine_tuning_chosen_in_the_wizard_leaves_the_command_lines_rank_out() -> None:
    """`advisor tui --method qlora --lora-rank 8`, then full fine-tuning picked in the workload step: the rank is
    the adapters' and is left out (the command line refuses it with --method full), so the plan is full's."""
    app = RecordingApp(model="gpt2", gpu="a100-80gb", method="qlora", lora_rank=8, hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.recommendation is not None)
        app.query_one("TabbedContent").active = "workload"
        await pilot.pause()
        app.query_one("#method").value = "full"
        await pilot.pause()
        app.recommendation = None
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.recommendation is not None or PlanningFailed in kinds(app))
        assert app.recommendation is not None and app.recommendation.plan.method == "full"


async def test_planning_failure_is_shown_not_raised() -> None:
    app = RecordingApp(model="meta-llama/Llama-3.1-8B", gpu="t4", seq_len=16384, hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: PlanningFailed in kinds(app))
        assert "would fit" in app.messages[-1].error and app.recommendation is None
        assert app.query_one("#rec-summary").has_class("error")


async def test_a_bad_value_is_refused_with_the_command_lines_words() -> None:
    app = RecordingApp(gpu="a100-80gb", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#model-input").value = "gpt2"
        app.query_one("#seq-len").value = "0"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: PlanningFailed in kinds(app))
        assert "--seq-len must be > 0, got 0" in app.messages[-1].error  # what `advisor recommend` prints
        assert app.recommendation is None


async def test_validate_step_runs_in_a_worker_and_cancel_keeps_the_partial_report(tmp_path) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    app = RecordingApp(hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        _tiny_trial(app, path, steps="2")
        await pilot.press("ctrl+t")
        assert app.step == "validate"
        await wait_for(pilot, lambda: ValidationDone in kinds(app), timeout=120)
        done = app.messages[-1]
        assert done.error is None and done.report.verdict in ("confirmed", "corrected")
        assert ValidationProgress in kinds(app) and app.report is done.report
        # a long one, cancelled with escape once steps run
        app.query_one("#trial-steps").value = "100000"
        app.messages.clear()
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: isinstance(app.screen, Confirm))  # that long a trial asks first
        await pilot.press("y")
        await wait_for(pilot, lambda: sum(isinstance(m, ValidationProgress) for m in app.messages) >= 4, timeout=120)
        await pilot.press("escape")
        await pilot.pause()
        assert "Stopping…" in str(app.query_one("#validate-live").render()) or ValidationDone in kinds(app)
        await wait_for(pilot, lambda: ValidationDone in kinds(app), timeout=120)
        report = app.messages[-1].report
        assert report.interrupted and report.trials[0].status == "interrupted"
        assert app.report is report and not app.query_one("#validate-start").disabled


async def test_q_during_validation_stops_at_the_step_then_quits(tmp_path) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    app = RecordingApp(hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        _tiny_trial(app, path, steps="2000")
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: sum(isinstance(m, ValidationProgress) for m in app.messages) >= 3, timeout=120)
        app.set_focus(None)
        await pilot.press("q")
        assert app.quitting
        await wait_for(pilot, lambda: not app.is_running, timeout=120)
    done = [m for m in app.messages if isinstance(m, ValidationDone)]
    # the app left only once the worker had stopped, at a step boundary, long before the 2000 steps
    assert done and done[-1].report.interrupted and done[-1].report.trials[0].status == "interrupted"


async def test_a_plan_for_another_gpu_or_a_long_trial_asks_before_validating() -> None:
    app = RecordingApp(model="gpt2", gpu="a100-80gb", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.recommendation is not None)
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: isinstance(app.screen, Confirm))
        question = str(app.screen.query_one("#confirm-question").render())
        assert "NVIDIA A100" in question and "this machine has no NVIDIA GPU" in question
        assert "the plan for this machine instead" in question and "s per step" in question
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, Confirm), timeout=5)
        assert not app.query_one("ValidateStep").running
        assert "Not started." in str(app.query_one("#validate-live").render())


@pytest.mark.parametrize(
    "step, focused",
    [("model", "model-input"), ("workload", "seq-len"), ("validate", "validate-start"), ("export", "out-dir")],
)
async def test_entering_a_step_focuses_its_first_field(step: str, focused: str) -> None:
    app = RecordingApp(hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("TabbedContent").active = step
        # the focus moves after the tab's activation message is handled: under load (the CI's two workers) one
        # pause was not always enough, so wait for it (a wrong field still fails: the wait times out)
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == focused, timeout=10)
        assert app.focused is not None and app.focused.id == focused


async def test_next_best_plans_show_every_setting_that_differs() -> None:
    app = RecordingApp(model="gpt2", gpu="a100-80gb", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.recommendation is not None)
        rec = app.recommendation
        rows = [plan_differences(alt.plan, rec.plan) for alt in rec.alternative_plans]
        assert rows and "same settings" not in rows
        for alt, row in zip(rec.alternative_plans, rows):
            differing = {k for k, v in alt.plan.model_dump().items() if rec.plan.model_dump()[k] != v}
            assert {part.split("=")[0] for part in row.split(", ")} == differing
        assert len(set(rows)) == len(rows)  # no two rows that look the same


async def test_the_hardware_step_compares_the_catalog_for_the_model() -> None:
    app = RecordingApp(hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#model-input").value = "gpt2"
        await pilot.press("ctrl+g")
        assert app.step == "hardware"
        await wait_for(pilot, lambda: ComparisonReady in kinds(app))
        done = next(m for m in app.messages if isinstance(m, ComparisonReady))
        assert done.error is None and done.comparison.model == "gpt2"
        assert len(done.comparison.rows) == len(catalog())
        from rich.console import Console

        console = Console(width=76, record=True, file=__import__("io").StringIO())
        console.print(app.query_one("#comparison").content)
        shown = console.export_text()
        assert "tokens/s" in shown and "h100-sxm" in shown and "plans:" in shown  # the table of `advisor compare`


async def test_export_saves_the_json_and_the_configs(tmp_path) -> None:
    app = RecordingApp(model="gpt2", gpu="a100-80gb:8", hardware=CPU_HW, out_dir=str(tmp_path / "cfg"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.recommendation is not None)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: Exported in kinds(app))
        assert app.step == "export"
        names = sorted(p.name for p in app.saved)
        assert names == [
            ".advisor-emitted.json",
            "accelerate_config.yaml",
            "launch.sh",
            "model_kwargs.json",
            "plan.json",
            "recommendation.json",
            "sft_config.json",
            "train.py",
            "training_args.json",
        ]
        saved = json.loads((tmp_path / "cfg" / "recommendation.json").read_text())
        assert saved["plan"] == app.recommendation.plan.model_dump()


@pytest.mark.parametrize("step", ["hardware", "model", "workload", "recommendation", "validate", "export"])
async def test_q_quits_from_every_step(step) -> None:
    app = RecordingApp(hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("TabbedContent").active = step
        await pilot.press("escape")  # leave a text field: q is a letter there
        app.set_focus(None)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_steps_move_with_the_keyboard() -> None:
    app = RecordingApp(hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+n")
        assert app.step == "model"
        await pilot.press("ctrl+b", "ctrl+b")
        assert app.step == "hardware"


# ── snapshots (pytest-textual-snapshot; `pytest --snapshot-update` records them) ──────────────────


def _ready(condition):
    async def run_before(pilot) -> None:
        await wait_for(pilot, lambda: condition(pilot.app))
        await pilot.pause(0.3)  # let layout and any scrolling settle before the picture

    return run_before


def test_snapshot_recommendation(snap_compare) -> None:
    app = RecordingApp(model="gpt2", gpu="a100-80gb", hardware=CPU_HW)
    assert snap_compare(app, terminal_size=SIZE, run_before=_ready(lambda a: a.recommendation is not None))


def test_snapshot_hardware(snap_compare) -> None:
    app = RecordingApp(hardware=CPU_HW)
    assert snap_compare(app, terminal_size=SIZE, run_before=_ready(lambda a: HardwareProbed in kinds(a)))


def test_snapshot_model_error(snap_compare) -> None:
    app = RecordingApp(hardware=CPU_HW)

    async def run_before(pilot) -> None:
        pilot.app.query_one("TabbedContent").active = "model"
        await pilot.pause()
        box = pilot.app.query_one("#model-input")
        box.value = "no-such-org/no-such-model"
        box.cursor_blink = False  # a steady cursor: the picture must not depend on when the blink timer fired
        box.select_on_focus = False  # nor on whether focus's select-all had painted (a CI run caught it highlighted)
        box.focus()
        await pilot.press("enter")
        await _ready(lambda a: ModelFailed in kinds(a))(pilot)  # and let the error line settle, as the others do

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# ── a real terminal ───────────────────────────────────────────────────────────────────────────────


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_real_terminal_shows_the_recommendation_and_q_ends_it(tmp_path) -> None:
    session = f"advisor-test-{time.monotonic_ns()}"
    done = tmp_path / "exit-code"
    env_prefix = " ".join(f"{k}={v}" for k, v in (("HF_HUB_OFFLINE", "1"), ("PYTHONPATH", ENV["PYTHONPATH"])))
    command = (
        f"cd {ROOT} && {env_prefix} {ROOT / '.venv' / 'bin' / 'python'} -m advisor tui --model gpt2 "
        f"--gpu a100-80gb; echo $? > {done}"
    )

    command = command.replace(str(ROOT / ".venv" / "bin" / "python"), sys.executable)
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command], check=True)
    try:
        pane = ""
        deadline = time.monotonic() + 60
        while "Plan:" not in pane and time.monotonic() < deadline:
            time.sleep(0.3)
            pane = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
        assert "Plan: bf16" in pane and "A100" in pane and "Recommendation" in pane, pane
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 20
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.exists() and done.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


@pytest.mark.parametrize(
    "field, value, flag", [("#seq-len", "0", "--seq-len"), ("#global-batch", "0", "--global-batch-size")]
)
async def test_a_bad_value_gets_the_same_line_as_from_the_cli_and_the_api(field, value, flag) -> None:
    """Issue 15: the same bad value, the same message, whichever way it comes in (the wizard shows the API's
    UsageError, which the CLI prints after 'advisor: error: ')."""
    from advisor.app.api import recommend
    from advisor.core.errors import UsageError

    keyword = {"--seq-len": "seq_len", "--global-batch-size": "global_batch_size"}[flag]
    with pytest.raises(UsageError) as api:
        recommend("gpt2", gpu="a100-80gb", **{keyword: int(value)})
    cli = advisor("recommend", "--model", "gpt2", "--gpu", "a100-80gb", flag, value)
    assert cli.returncode == 2 and cli.stderr.strip().endswith(str(api.value))
    app = RecordingApp(gpu="a100-80gb", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#model-input").value = "gpt2"
        app.query_one("TabbedContent").active = "workload"
        await pilot.pause()
        app.query_one(field).value = value
        app.action_recommend()
        await wait_for(pilot, lambda: PlanningFailed in kinds(app))
        assert app.messages[-1].error == str(api.value)
        assert app.is_running


async def test_the_workload_step_asks_for_a_stack_value() -> None:
    """Issue 13: the wizard offers the stack settings (auto: the planner's) and plans with the one chosen."""
    app = RecordingApp(gpu="a100-80gb", hardware=CPU_HW, torch_compile=False)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#model-input").value = "gpt2"
        app.query_one("TabbedContent").active = "workload"
        await pilot.pause()
        assert app.query_one(WorkloadStep).stack_choice() == {"torch_compile": False}  # from the option
        app.query_one("#stack-attention").value = "eager"
        assert app.query_one(WorkloadStep).stack_choice() == {"attention": "eager", "torch_compile": False}
        app.action_recommend()
        await wait_for(pilot, lambda: app.recommendation is not None)
        plan = app.recommendation.plan
        assert (plan.attention, plan.torch_compile) == ("eager", False)


def test_the_memory_bar_gives_an_offload_s_host_ram_its_own_verdict() -> None:
    """As the memory table does: the device line says the GPU fits, a host line what the offload takes and that
    a 16 GB host cannot hold it; without --host-memory, the catalog's typical host's RAM."""
    import io

    from rich.console import Console

    from advisor.app.api import estimate
    from tui.widgets import memory_bar

    def text(**kw) -> str:
        est = estimate(
            "meta-llama/Llama-2-7b-hf", gpu="rtx-4090", offload="optimizer", gradient_checkpointing=True, **kw
        )
        console = Console(width=200, file=io.StringIO(), color_system=None, record=True)
        console.print(memory_bar(est.memory))
        return console.export_text()

    lines = text(host_memory_bytes=16 * 10**9).splitlines()
    assert lines[0].startswith("Memory: ") and lines[0].rstrip().endswith(" fits")
    assert lines[1].startswith("Host RAM (offload): ") and lines[1].rstrip().endswith("does not fit")
    # without --host-memory: the catalog's typical host (64 GiB for an RTX 4090, 48 of it usable), never unchecked
    assert "of 48.00 GiB usable" in text().splitlines()[1]
