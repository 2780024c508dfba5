"""The Textual wizard: hardware → model → workload → recommendation → validate → export.

It holds no advice of its own: every figure and choice comes from the probes, the planner, the
estimate and the validator (``advisor.app.api``). Each step is a module of :mod:`tui.steps` that
asks its question and runs its slow work (probing, profiling, planning, validation) in a worker
thread, so the interface never freezes; the results come back as :mod:`tui.messages`. This app
composes the steps, keeps what they share (the machine, the model, the recommendation, the
report) and moves between them. Keyboard first: the footer lists the bindings; ``q`` quits
(``ctrl+q`` also while typing), ``ctrl+n`` / ``ctrl+b`` move between the steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Button, Footer, Input, Static, TabbedContent

from advisor.app.options import WIZARD_OUT_DIR, HardwareOptions, MethodOptions, StackOptions, WorkloadOptions, parse
from advisor.engine.recommendation import Recommendation
from advisor.core.dimensions import ADAPTER_SHAPE
from advisor.core.errors import UsageError
from probes.hardware import HardwareProfile
from probes.model import ModelProfile
from advisor.core.vocabulary import Method
from tui.confirm import Confirm
from tui.messages import (
    Exported,
    HardwareProbed,
    ModelFailed,
    ModelResolved,
    PlanningFailed,
    RecommendationReady,
    ValidationDone,
)
from tui.steps import STEPS, ExportStep, HardwareStep, ModelStep, RecommendationStep, ValidateStep, WorkloadStep
from tui.steps.workload import AUTO_METHOD


class AdvisorApp(App):
    """The advisor wizard. Options are those of ``advisor recommend``; with a model it opens on the
    recommendation. ``hardware`` replaces the local probe (tests and snapshots use it)."""

    CSS_PATH = Path(__file__).with_name("advisor.tcss")  # absolute: subclasses elsewhere find it too
    TITLE = "advisor"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
        Binding("ctrl+n", "next_step", "Next", priority=True),
        Binding("ctrl+b", "previous_step", "Back", priority=True),
        Binding("ctrl+r", "recommend", "Recommend", priority=True),
        Binding("ctrl+t", "validate", "Validate", priority=True),
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("ctrl+g", "compare", "Compare GPUs", show=False, priority=True),
        Binding("escape", "cancel", "Cancel / leave field", show=False),
    ]

    def __init__(
        self,
        *,
        model: str | None = None,
        out_dir: str = WIZARD_OUT_DIR,
        hardware: HardwareProfile | None = None,
        **options: Any,
    ) -> None:
        """``options``: the hardware, workload and method options of ``advisor recommend`` (their defaults and
        bounds are declared once, in :mod:`advisor.app.options`).

        Raises:
            UsageError: an option the declarations do not know, or a value out of bounds.
        """
        super().__init__()
        declared = {
            **parse(HardwareOptions, _pick(HardwareOptions, options)).model_dump(),
            **parse(WorkloadOptions, _pick(WorkloadOptions, options)).model_dump(),
            **parse(MethodOptions, _pick(MethodOptions, options)).model_dump(),
            **parse(StackOptions, _pick(StackOptions, options)).model_dump(),
        }
        unknown = set(options) - set(declared)
        if unknown:
            raise UsageError(f"unknown option '{sorted(unknown)[0]}'")
        self.options = dict(model=model, out_dir=out_dir, **declared)
        self.local_hardware: HardwareProfile | None = hardware
        self.profile: ModelProfile | None = None
        self.recommendation: Recommendation | None = None
        self.report = None
        self.saved: list[Path] = []
        self.quitting = False  #: q was pressed during a validation: quit once it has stopped

    def compose(self) -> ComposeResult:
        o = self.options
        with TabbedContent(initial=HardwareStep.STEP, id="wizard"):
            yield HardwareStep(gpu=o["gpu"], nodes=o["nodes"])
            yield ModelStep(model=o["model"])
            yield WorkloadStep(
                seq_len=o["seq_len"],
                global_batch_size=o["global_batch_size"],
                task=o["task"],
                objective=o["objective"],
                method=o["method"],
                stack={k: o.get(k) for k in StackOptions.model_fields},
            )
            yield RecommendationStep()
            yield ValidateStep()
            yield ExportStep(out_dir=o["out_dir"])
        yield Footer()

    def on_mount(self) -> None:
        """Probe (or take the given machine); with a model, resolve it and recommend."""
        if self.local_hardware is None:
            self.query_one(HardwareStep).probe()
        else:
            self.query_one(HardwareStep).post_message(HardwareProbed(self.local_hardware))
        if not self.options["model"]:  # the first step's first field, as entering any step focuses it
            self.call_after_refresh(self._focus_first, self.query_one(HardwareStep))
        if self.options["model"]:
            self.step = RecommendationStep.STEP
            self.query_one(ModelStep).resolve(self.options["model"], self.options["task"], then_recommend=True)

    # ── what the steps report ───────────────────────────────────────────────
    def on_hardware_probed(self, message: HardwareProbed) -> None:
        """Keep the machine: plans for this machine use it."""
        self.local_hardware = message.hardware

    def on_model_resolved(self, message: ModelResolved) -> None:
        """Keep the profile: planning for the same model reuses it."""
        self.profile = message.profile

    def on_model_failed(self, message: ModelFailed) -> None:
        """Forget the profile."""
        self.profile = None

    def on_recommendation_ready(self, message: RecommendationReady) -> None:
        """Keep the recommendation; step 2 shows the model it used."""
        self.recommendation = message.recommendation
        self.profile = message.recommendation.model
        self.query_one(ModelStep).show_profile(message.recommendation.model)

    def on_planning_failed(self, message: PlanningFailed) -> None:
        """Forget the recommendation: nothing to save."""
        self.recommendation = None

    def on_validation_done(self, message: ValidationDone) -> None:
        """Keep the report (saved beside the recommendation); quit if q asked to."""
        if not message.error:
            self.report = message.report
        if self.quitting:
            self.exit()

    @on(TabbedContent.TabActivated)
    def _focus_step(self, event: TabbedContent.TabActivated) -> None:
        """Entering a step focuses its first field (the Validate step: its Start or Cancel button, so that q and
        escape keep their meaning), so that typing goes somewhere."""
        if event.pane is not None:
            self.call_after_refresh(self._focus_first, event.pane)

    def _focus_first(self, pane) -> None:
        """Focus the first field of a step shown (see :meth:`_focus_step`), unless a field of it has focus already
        (one clicked before this deferred call ran keeps it)."""
        if self.focused is not None and pane in self.focused.ancestors:
            return
        if pane.id == ValidateStep.STEP:
            first = next((b for b in pane.query(Button) if not b.disabled), None)
        else:
            first = next(
                (w for w in pane.screen.focus_chain if pane in w.ancestors and type(w) is not VerticalScroll), None
            )  # a RadioSet is one
        if first is not None:
            pane.screen.set_focus(first, scroll_visible=False)  # its own screen: a dialog above keeps the keys

    def on_exported(self, message: Exported) -> None:
        """Keep the paths written."""
        self.saved = message.paths

    @on(Input.Submitted, "#model-input")
    def _model_submitted(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.query_one(ModelStep).resolve(event.value.strip(), self.query_one(WorkloadStep).task_choice())

    # ── actions ─────────────────────────────────────────────────────────────
    def _model_or_warn(self) -> str | None:
        """The model typed on step 2, or None after sending the user there."""
        text = self.query_one(ModelStep).text
        if not text:
            self.step = ModelStep.STEP
            self.notify("Choose a model first", severity="warning")
            return None
        return text

    def action_recommend(self) -> None:
        """Plan for the question the steps ask (``ctrl+r``)."""
        text = self._model_or_warn()
        if text is None:
            return
        gpu, nodes = self.query_one(HardwareStep).gpu_choice()
        workload = self.query_one(WorkloadStep).workload_choice()
        step = self.query_one(RecommendationStep)
        step.planning()
        self.step = RecommendationStep.STEP
        hardware = self.local_hardware if gpu is None and nodes == 1 else None
        model = (
            self.profile
            if self.profile is not None and self.profile.id == text and (workload["task"] in (None, self.profile.task))
            else text
        )
        network = (
            {}
            if hardware is not None
            else dict(interconnect=self.options["interconnect"], inter_node_gbps=self.options["inter_node_gbps"])
        )
        adapters = self._adapter_shape(workload["method"])
        if self.options.get("mean_sample_len") is not None:
            adapters["mean_sample_len"] = self.options["mean_sample_len"]
        stack = self.query_one(WorkloadStep).stack_choice()  # the step's fields start from the stack options
        step.plan(
            model, gpu=gpu, nodes=nodes, hardware=hardware, workload={**workload, **adapters, **stack}, network=network
        )

    def _adapter_shape(self, method: str) -> dict[str, Any]:
        """The adapters' shape given on the command line (``--lora-rank``, ``--lora-targets``), for a method that may
        train adapters (auto, lora, qlora); full fine-tuning chosen in the wizard leaves it out, where the command
        line would refuse it (:func:`advisor.app.plan_flags.require_adapters_for`)."""
        if method != AUTO_METHOD and not Method.of(method).spec.adapters:
            return {}
        return {k: self.options[k] for k in ADAPTER_SHAPE if self.options.get(k) is not None}

    def action_validate(self) -> None:
        """Validate this machine's plan with trial steps (``ctrl+t``)."""
        step = self.query_one(ValidateStep)
        if step.running:
            return
        text = self._model_or_warn()
        if text is None:
            return
        self.step = ValidateStep.STEP
        workload = self.query_one(WorkloadStep).workload_choice()
        workload.pop("objective")
        if workload["method"] == AUTO_METHOD:  # the trial takes this machine's plan as the planner chooses it
            workload.pop("method")
        step.query_one("#validate-live", Static).update("Pricing this machine's plan…")
        rec, here, steps = self.recommendation, self.local_hardware, step.trial_steps()

        def ask() -> None:  # a planner search: off the event loop, so the screen stays live
            question = trial_question(rec, here, text, workload, steps)
            self.call_from_thread(self._ask_before_trial, question, text, workload)

        self.run_worker(ask, thread=True, exclusive=True, group="trial-question")

    def _ask_before_trial(self, question: str | None, text: str, workload: dict[str, Any]) -> None:
        """Start the trial, or first ask ``question`` (:func:`trial_question`)."""
        step = self.query_one(ValidateStep)
        if question is None:
            step.start(text, workload)
            return

        def answer(start: bool | None) -> None:
            if start:
                step.start(text, workload)
            else:
                step.query_one("#validate-live", Static).update("Not started.")

        self.push_screen(Confirm(question), answer)

    async def action_quit(self) -> None:
        """Quit (``q``); during a validation, stop it first (within 2 s), saying so."""
        step = self.query_one(ValidateStep)
        if not step.running:
            self.exit()
            return
        self.quitting = True
        self.step = ValidateStep.STEP
        step.cancel()
        self.notify("Stopping the trial (within 2 s), then quitting…", timeout=600)

    def action_compare(self) -> None:
        """The model's best plan on every catalog GPU, on the Hardware step (``ctrl+g``; ``advisor compare``)."""
        text = self._model_or_warn()
        if text is None:
            return
        workload = self.query_one(WorkloadStep).workload_choice()
        adapters = self._adapter_shape(workload["method"])
        step = self.query_one(HardwareStep)
        self.step = HardwareStep.STEP
        step.comparing()
        step.compare(text, {**workload, **adapters})

    def action_cancel(self) -> None:
        """Stop a running validation, else leave the text field (``escape``)."""
        step = self.query_one(ValidateStep)
        if step.running:
            step.cancel()
        elif isinstance(self.focused, Input):
            self.set_focus(None)

    def action_save(self) -> None:
        """Save the recommendation, the report and the configs (``ctrl+s``)."""
        self.step = ExportStep.STEP
        self.query_one(ExportStep).save(self.recommendation, self.report)

    # ── navigation ──────────────────────────────────────────────────────────
    @property
    def step(self) -> str:
        """The step shown (a TabPane id)."""
        return self.query_one(TabbedContent).active

    @step.setter
    def step(self, step: str) -> None:
        self.query_one(TabbedContent).active = step

    def _go(self, delta: int) -> None:
        self.step = STEPS[max(0, min(len(STEPS) - 1, STEPS.index(self.step) + delta))]

    def action_next_step(self) -> None:
        """The next step (``ctrl+n``); leaving the model resolves it, leaving the workload plans."""
        text = self.query_one(ModelStep).text
        if self.step == ModelStep.STEP and text and self.profile is None:
            self.query_one(ModelStep).resolve(text, self.query_one(WorkloadStep).task_choice())
        if self.step == WorkloadStep.STEP:
            self.action_recommend()
            return
        self._go(+1)

    def action_previous_step(self) -> None:
        """The previous step (``ctrl+b``)."""
        self._go(-1)


def trial_question(
    rec: Recommendation | None, here: HardwareProfile | None, model: str, workload: dict[str, Any], steps: int
) -> str | None:
    """What to ask before a trial, or None: the recommendation shown is for other hardware (the trial validates
    this machine's own plan), or the trial is predicted to take longer than
    :data:`advisor.app.progress.LONG_TRIAL_S` (the command line warns of the same)."""
    from advisor.app import api
    from advisor.app.compare import duration
    from advisor.app.options import TrialOptions
    from advisor.app.progress import LONG_TRIAL_S
    from advisor.core.errors import AdvisorError

    def where(hw: HardwareProfile) -> str:
        return f"{hw.num_gpus} × {hw.gpu.name}" if hw.gpu else "no NVIDIA GPU (the CPU)"

    lines = []
    if (
        rec is not None
        and here is not None
        and rec.hardware.source == "catalog"
        and ((rec.hardware.gpu and rec.hardware.gpu.name) != (here.gpu and here.gpu.name))
    ):
        lines.append(
            f"The recommendation is for {where(rec.hardware)}; this machine has {where(here)}. The trial "
            "validates the plan for this machine instead."
        )
    try:
        local = api.recommend(model, hardware=here, **workload)
    except AdvisorError:
        local = None  # the validation says why, in its own words
    if local is not None:
        total = local.speed.step_time_s * (steps + TrialOptions.model_fields["warmup"].default)
        if total > LONG_TRIAL_S:
            lines.append(
                f"This machine's plan ({local.plan.describe()}) is predicted at "
                f"{local.speed.step_time_s:.3g} s per step: about {duration(total)} in all. Fewer timed "
                "steps here, or a shorter sequence or a smaller batch on step 3, make it shorter."
            )
    return "\n\n".join(lines + ["Start the trial?"]) if lines else None


def _pick(group, options: dict[str, Any]) -> dict[str, Any]:
    """The options that belong to an option group."""
    return {k: v for k, v in options.items() if k in group.model_fields}


def run(**options: Any) -> int:
    """Run the wizard (``advisor tui``); the exit code."""
    AdvisorApp(**options).run()
    return 0
