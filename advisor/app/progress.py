"""What ``advisor validate`` shows and reads besides the report: the trials' progress on stderr, the
console every command prints with, and the plan of a ``--plan`` file."""

from __future__ import annotations

import json
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from advisor.core.limits import MAX_MODEL_ID, MAX_SEQ_LEN
from advisor.core.text import shown


#: A trial longer than this (seconds, warm-up and timed steps together) is "long": the CLI says how to shorten it
#: and the wizard asks before it starts. Our threshold for an interactive check (five minutes), from no source.
LONG_TRIAL_S = 300


def console(stderr: bool = False):
    """A rich console: stdout (or stderr), as wide as the terminal, or as ``COLUMNS`` says, else 160 columns when
    not a terminal so that piped output is stable."""
    import os

    from rich.console import Console

    return Console(stderr=stderr, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)


#: How long a command works before it says so on stderr (a terminal only): what people notice as a wait.
SLOW_NOTICE_S = 1.0


@contextmanager
def slow_notice(text: str, after_s: float = SLOW_NOTICE_S) -> Iterator[None]:
    """A rich spinner with ``text`` on stderr once the block has run ``after_s`` seconds (a terminal only: piped
    stderr stays one line per diagnostic); gone when the block ends."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    status = Console(stderr=True).status(text)
    timer = threading.Timer(after_s, status.start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        status.stop()


def read_plan(path: str):
    """The plan, sequence length and model id of a recommend / estimate / validate JSON file (``(Plan, int | None,
    str | None)``: a length or id the file lacks is None).

    Raises:
        UsageError: one line naming the file and, for a bad plan, the field (``plan.micro_batch_size must be
            from 1 to ..., got 0``): unreadable, larger than a plan, not UTF-8, not JSON, no plan, a bad value.
    """
    from pydantic import ValidationError

    from advisor.core.errors import UsageError
    from probes.config_check import read_json
    from rules import Plan

    data = read_json(path, f"--plan {shown(str(path))}")
    raw = data.get("plan") or data.get("confirmed_plan") if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        raise UsageError(f"--plan {path} has no 'plan' (the JSON of advisor recommend / estimate / validate)")
    try:
        plan = Plan.model_validate_json(json.dumps(raw), strict=True)  # JSON mode: enum values as strings
    except ValidationError as err:
        first = err.errors()[0]
        raise UsageError(f"--plan {path}: plan.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    from advisor.app.plan_flags import require_bounded_batch, require_plan_counts

    require_plan_counts(plan, f"--plan {path}: ")
    workload = data.get("workload")
    if workload is not None and not isinstance(workload, dict):  # was ignored: the trial ran at the default seq-len
        raise UsageError(f"--plan {path}: workload must be an object, got {type(workload).__name__}")
    seq_len = (workload or {}).get("seq_len")
    if seq_len is not None and (
        not isinstance(seq_len, int) or isinstance(seq_len, bool) or not 1 <= seq_len <= MAX_SEQ_LEN
    ):
        raise UsageError(
            f"--plan {path}: workload.seq_len must be from 1 to {MAX_SEQ_LEN} (a whole number), "
            f"got {shown(json.dumps(seq_len))}"
        )
    require_bounded_batch(plan, f"--plan {path}: ")
    model = data.get("model")  # recommend / estimate: the model profile; validate: its id
    model = model.get("id") if isinstance(model, dict) else model
    model = model[:MAX_MODEL_ID] if isinstance(model, str) else None  # compared with --model; shown through shown()
    return plan, seq_len, model


def same_model(given: str, planned: str) -> bool:
    """Whether ``--model given`` names the model a plan file was made for (``planned``: its model id): the same id,
    or paths to the same folder (a config.json path names its folder)."""
    from pathlib import Path

    if given == planned:
        return True

    def folder(name: str):
        path = Path(name).expanduser()
        return (path.parent if path.name == "config.json" else path).resolve() if path.exists() else None

    return folder(given) is not None and folder(given) == folder(planned)


class Progress:
    """The validator's progress on stderr: a rich bar with the live step time and memory on a
    terminal, one line per step otherwise."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console(stderr=True)
        self.live = self.console.is_terminal
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.live,
            transient=False,
        )
        self.task = None
        self.index = 0

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def __call__(self, event) -> None:
        from advisor.measure.trial import StepUpdate
        from advisor.measure.validation import Trial, TrialStarted

        if isinstance(event, TrialStarted):
            self.index = event.index
            about = event.predicted_step_time_s * event.total_steps
            self.console.print(
                f"advisor: trial {event.index} ({event.role}): {event.plan.describe()}; predicted "
                f"{event.predicted_step_time_s:.3g} s/step, about {about:.0f} s for "
                f"{event.total_steps} steps",
                highlight=False,
            )
            if about > LONG_TRIAL_S and event.index == 1:
                self.console.print(
                    "advisor: that is long for a trial: --steps, --seq-len or --global-batch-size make it shorter",
                    highlight=False,
                )
            self.task = self.bar.add_task(f"trial {event.index}", total=event.total_steps, info="building")
        elif isinstance(event, StepUpdate):
            info = event.describe()
            if self.task is not None:
                self.bar.update(self.task, completed=event.step, info=info)
            if not self.live:
                self.console.print(f"advisor: trial {self.index} {info}", highlight=False)
        elif isinstance(event, Trial):
            m = event.measured
            done = f"{event.status}" + (f": {event.message}" if event.message else "")
            if m and m.step_time_s:
                done += f", {m.step_time_s:.3f} s/step, {m.tokens_per_s:,.0f} tokens/s"
            if self.task is not None:
                self.bar.update(self.task, info=done)
            self.console.print(f"advisor: trial {self.index} {done}", highlight=False)
