"""``advisor validate``: its flags and its command (short trial steps on this machine's device; imports torch only
when it runs). Signals stop it at a step boundary with the partial report; the report's target is checked before the
trials run."""

from __future__ import annotations

import argparse
import sys

from advisor.app.options import HubOptions, ModelOptions, PlanOptions, TrialOptions, WorkloadOptions, add_arguments, collect
from advisor.app.progress import console as _console
from advisor.core.errors import ExitCode, OutputError
from advisor.core.dimensions import VALIDATE_FLAGS
from advisor.core.text import shown


def cmd_validate(args: argparse.Namespace) -> int:
    import signal
    import threading

    from advisor.app.api import validate
    from advisor.app.files import check_target, write_atomic
    from advisor.app.progress import Progress, read_plan, same_model

    if args.output:
        check_target(args.output)  # before the trials, not after them
    plan, seq_len, planned = read_plan(args.plan) if args.plan else (None, None, None)
    mismatch = None
    if planned is not None and not same_model(args.model, planned):  # said before the trials and in the report
        mismatch = (f"--plan {shown(args.plan)} was made for {shown(planned)}, not {shown(args.model)}: its micro-batch and memory "
                    "settings were sized for that model")
        sys.stderr.write(f"advisor: {mismatch}\n")
    stop = threading.Event()
    progress = Progress()

    def on_sigint(signum, frame) -> None:
        if stop.is_set() or not progress.index:  # a second Ctrl-C (or SIGTERM, SIGHUP), or no trial yet (torch
            raise KeyboardInterrupt  # still importing, the plan being searched): stop now, there is no step to finish
        stop.set()
        again = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        sys.stderr.write(f"advisor: stopping within 2 s, the step under way cut (a distributed trial: at its step "
                         f"boundary); {again} again to stop now\n")

    # SIGTERM and SIGHUP end a validation like Ctrl-C (the step cut, the partial report printed and written, exit 130)
    handled = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {signum: signal.signal(signum, on_sigint) for signum in handled}
    try:
        with progress:
            workload = {**collect(args, WorkloadOptions), "seq_len": args.seq_len or seq_len}
            report = validate(args.model, plan=plan, progress=progress, stop=stop, **workload,
                              **collect(args, PlanOptions), **collect(args, TrialOptions))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if mismatch is not None:
        report.warnings.insert(0, mismatch)
    text = report.model_dump_json(indent=2) + "\n"
    failed_write = None
    if args.output:
        try:
            write_atomic(args.output, text)
            sys.stderr.write(f"advisor: wrote {args.output}\n")
        except OutputError as err:  # the report still goes to stdout
            failed_write = err
    if args.json:
        sys.stdout.write(text)
    else:
        from advisor.app.report import validation_tables

        _console().print(validation_tables(report))
    if failed_write is not None:
        raise failed_write
    if report.interrupted:
        return ExitCode.INTERRUPTED
    return ExitCode.VALIDATION_FAILED if report.verdict == "failed" else ExitCode.OK


def settle(code: int) -> int:
    """The process's exit code, after a trial cut mid-step (Ctrl-C, the time budget): its thread still runs that
    step inside torch, and the interpreter's shutdown under it aborts (SIGABRT), so the process ends here at once,
    its output flushed (``os._exit``). The command line's entry only: in-process callers keep the thread."""
    session = sys.modules.get("advisor.measure.session")
    if session is None or not session.trial_running():
        return code
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or full pipe: nothing more to say
            pass
    os._exit(code)


def add_parser(sub, epilog: str) -> None:
    """``advisor validate``: the workload, the plan settings a trial takes, and the trial options."""
    p = sub.add_parser("validate", help="short trial steps of the plan on this machine: confirm or correct it",
                       epilog=epilog)
    add_arguments(p, ModelOptions, required=("model",),
                  helps={"model": "Hub id (gpt2), a folder with config.json (its weights are used when present), "
                                  "or a config.json path"})
    add_arguments(p, HubOptions)
    add_arguments(p, WorkloadOptions, ("task", "global_batch_size"))
    add_arguments(p, WorkloadOptions, ("seq_len",), helps={
        "seq_len": "tokens per sample (default: the --plan file's, else min(model max positions, 1024))"})
    p.add_argument("--plan", metavar="FILE", help="validate the plan of a recommend / estimate / validate JSON file, "
                                                  "with the plan settings given over it (default: none, this "
                                                  "machine's recommendation)")
    add_arguments(p.add_argument_group("plan settings (override this machine's recommendation or the --plan file's)"),
                  PlanOptions,
                  VALIDATE_FLAGS,
                  helps={"parallelism": "several processes: DDP, or FSDP as ZeRO-2 (SHARD_GRAD_OP) / ZeRO-3 "
                                        "(FULL_SHARD)"}, unset="the --plan file's, else this machine's recommendation")
    add_arguments(p, TrialOptions)
    p.add_argument("--output", metavar="FILE", help="also write the report's JSON to FILE (atomically) (default: none)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (default: off)")
    p.set_defaults(func=cmd_validate)
