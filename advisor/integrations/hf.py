"""advisor's transformers ``TrainerCallback`` (TRL's trainers too): :class:`AdvisorCallback`.

    from advisor.integrations import AdvisorCallback
    trainer = Trainer(..., callbacks=[AdvisorCallback("plan.json")])

Imports transformers (this module only: ``advisor.integrations`` loads it on first use of ``AdvisorCallback``).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from advisor.integrations.tracker import Tracker, check_options


class AdvisorCallback(TrainerCallback):
    """Checks a Trainer's run against advisor's prediction (:class:`~advisor.integrations.tracker.Tracker`): times
    the optimizer steps after a warm-up, logs predicted against measured, warns early, and appends a record to the
    local store. Only the main process measures. It returns no control changes: the training runs as without it.

    ``plan``: an advisor JSON file (``recommend --json`` / ``estimate --json``), a folder with ``plan.json``, or a
    dict; ``options``: the Tracker's (``warmup_steps``, ``measure_steps``, ``store``).

    Raises:
        UsageError: the plan cannot be read, or an option is unknown or bad (when the callback is made, before the
            training starts).
    """

    def __init__(self, plan: Any, **options: Any) -> None:
        from advisor.integrations.prediction import load

        check_options(**options)  # a bad option too: it reached the Tracker only when the training began
        self.prediction = load(plan)  # a bad plan is one line before the run, not after the first steps
        self.options = options
        self.tracker: Tracker | None = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.is_world_process_zero:
            name = getattr(getattr(model, "config", None), "name_or_path", None)
            self.tracker = Tracker(
                self.prediction,
                pin_memory=bool(args.dataloader_pin_memory),
                model_id=name or None,
                model=model,
                optimizer=optimizer,
                **self.options,
            )
        self._tokens_seen = state.num_input_tokens_seen or 0

    def on_step_begin(self, args, state, control, **kwargs):
        if self.tracker is not None:
            self.tracker.step_begin()

    def on_step_end(self, args, state, control, **kwargs):
        if self.tracker is None:
            return
        seen = state.num_input_tokens_seen or 0
        tokens, self._tokens_seen = (seen - self._tokens_seen) or None, seen
        self.tracker.step(tokens)

    def on_train_end(self, args, state, control, **kwargs):
        if self.tracker is not None:
            self.tracker.close()
