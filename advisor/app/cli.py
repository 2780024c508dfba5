"""The ``advisor`` command line: one function per command; errors mapped to exit codes in one place.

Data goes to stdout, diagnostics to stderr. Exit codes: :class:`advisor.core.errors.ExitCode`.
This module imports neither torch, transformers nor textual.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from typing import Callable, NoReturn

from advisor.app.options import (ESTIMATE_DEFAULTS, PLAN_FLAGS, WIZARD_OUT_DIR, CalibrationOption, HardwareOptions, HubOptions,
                                 MethodOptions, ModelOptions, PlanOptions, SimulateOption, StackOptions, WorkloadOptions,
                                 add_arguments, collect, join_negative_values)
from advisor.app.files import WRITE_ERRNOS, silence_stdout
from advisor.app.progress import console as _console, slow_notice
from advisor.core.errors import AdvisorError, ExitCode, NoFitError, UsageError
from advisor.core.kernels import LossKernel
from advisor.core.text import MAX_LINE, shown
from advisor.core.vocabulary import Offload
from advisor.core.units import GIB, MIB
from advisor.core.dimensions import BATCH

EXIT_CODES_HELP = "exit codes: " + ", ".join(f"{c.value} {c.name.lower().replace('_', '-')}" for c in ExitCode)


class _Parser(argparse.ArgumentParser):
    """argparse, with one-line errors and the documented usage exit code."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"advisor: error: {message} (see `{self.prog} --help`)\n")
        sys.exit(ExitCode.USAGE)


def _print_json(model) -> None:
    sys.stdout.write(model.model_dump_json(indent=2) + "\n")


def cmd_probe(args: argparse.Namespace) -> int:
    from advisor.app.api import probe_hardware

    if args.gpu and args.gpu.strip().lower() == "list":
        from advisor.app.hardware_report import list_gpus

        return list_gpus(args.json, _console())
    hw = probe_hardware(**collect(args, HardwareOptions))
    if args.measure_context:
        hw = _measured_context(hw, given=bool(args.gpu))
    if args.json:
        _print_json(hw)
    else:
        from advisor.app.hardware_report import hardware_table

        _console().print(hardware_table(hw))
    return ExitCode.OK


def _measured_context(hw, given: bool):
    """``hw`` with the CUDA context measured on this machine's first GPU (:func:`probes.cuda_stack.
    measure_context_bytes`: imports torch, seconds).

    Raises:
        UsageError: with ``--gpu`` (a catalog GPU is not here), without a GPU, torch's CUDA or NVML's per-process
            figure."""
    from probes.cuda_stack import measure_context_bytes

    if given or not hw.gpus:
        raise UsageError("--measure-context measures this machine's GPU: " + ("drop --gpu" if given else
                                                                                "no NVIDIA GPU was found here"))
    measured = measure_context_bytes(0)
    if measured is None:
        raise UsageError("--measure-context needs torch with CUDA and NVML's figure for this process: say "
                         "--cuda-context SIZE instead")
    note = (f"CUDA context measured: {measured / MIB:,.0f} MiB (NVML's figure for this process less torch's "
            f"reserved memory); plan with it: --cuda-context {measured // MIB}MiB")
    return hw.model_copy(update={"cuda_context_bytes": measured, "notes": [*hw.notes, note]})


def cmd_profile(args: argparse.Namespace) -> int:
    from advisor.app.api import profile_model

    profile = profile_model(args.model, args.task)
    if args.json:
        _print_json(profile)
    else:
        from advisor.app.report import model_table

        _console().print(model_table(profile))
    return ExitCode.OK


def cmd_recommend(args: argparse.Namespace) -> int:
    from advisor.app.api import recommend

    if args.emit:
        from advisor.app.emit import check_targets

        check_targets(args.emit, args.out)
    elif args.tokens is not None:
        raise UsageError("--tokens sets the length of the run the --emit files train: add --emit")
    try:
        with slow_notice(f"planning {args.model}…"):
            rec = recommend(args.model, **collect(args, HardwareOptions), **collect(args, WorkloadOptions),
                            **collect(args, MethodOptions), **collect(args, StackOptions),
                            **collect(args, CalibrationOption))
    except NoFitError as err:
        if args.json:
            closest = err.closest
            from advisor.engine.schema import SCHEMA_VERSION

            payload = {"schema_version": SCHEMA_VERSION, "fits": False, "error": str(err), "suggestions": err.suggestions,
                       "closest_plan": closest.plan.model_dump() if closest else None,
                       "closest_memory": closest.memory.model_dump() if closest else None}
            sys.stdout.write(json.dumps(payload, indent=2) + "\n")
            sys.stderr.write(f"advisor: {shown(err.summary, MAX_LINE)}\n")
            return err.exit_code
        raise
    if args.emit:
        from advisor.app.emit import emit

        for path in emit(rec, args.emit, args.out, args.tokens):
            sys.stderr.write(f"advisor: wrote {shown(path, MAX_LINE)}\n")
    if args.json:
        _print_json(rec)
    else:
        from advisor.app.report import print_recommendation

        print_recommendation(rec, _console(), explain=args.explain)
    return ExitCode.OK


def cmd_estimate(args: argparse.Namespace) -> int:
    from advisor.app.api import estimate

    from contextlib import nullcontext

    if args.timeline:  # a bad name or folder is refused before the simulation's seconds; the picture needs one
        from advisor.app.timeline import check_timeline_path, write_timeline

        check_timeline_path(args.timeline)
        args.simulate = True
    waiting = (_console(stderr=True).status("advisor: simulating a training step on fake tensors (seconds)…")
               if args.simulate and sys.stderr.isatty() else nullcontext())
    with waiting:  # a progress line on stderr while the simulation runs, when stderr is a terminal
        est = estimate(args.model, **collect(args, SimulateOption), **collect(args, HardwareOptions),
                       **collect(args, WorkloadOptions), **collect(args, PlanOptions), **collect(args, CalibrationOption))
    if args.timeline:
        sys.stderr.write(f"advisor: wrote {shown(write_timeline(est, args.timeline), MAX_LINE)}\n")
    if args.json:
        keys = {"schema_version", "plan", "memory", "speed", "warnings"} | ({"simulated"} if args.simulate else set())
        sys.stdout.write(est.model_dump_json(indent=2, include=keys) + "\n")
    else:
        from rich.markup import escape
        from rich.text import Text

        from advisor.app.report import memory_table, speed_table

        console = _console()
        p = est.plan
        where = f"{p.num_gpus} GPU(s)" if p.num_gpus else "the CPU"
        split = (f", tensor parallel {p.tensor_parallel} x pipeline parallel {p.pipeline_parallel}"
                 if p.model_parallel_size > 1 else "")
        strategy = "" if p.offload != Offload.NONE else f"{p.parallelism} "  # describe() names it with the offload
        console.print(f"[bold]{escape(shown(est.model.id))}[/]: {p.describe(data_parallel=False)}, {strategy}on {where}{split}, "
                      f"seq-len {est.workload.seq_len}", highlight=False)
        console.print(memory_table(est.memory))
        if est.simulated:
            sim = est.simulated
            console.print(f"Simulated step (fake tensors, {sim.wall_s:.1f} s): peak {sim.peak_bytes / GIB:.2f} GiB "
                          f"in the {sim.peak_phase}, device {sim.device_bytes / GIB:.2f} GiB; the analytic peak is "
                          f"{sim.analytic_error:+.1%} off")
        console.print(speed_table(est.speed))
        for w in est.warnings:
            console.print(Text.assemble(("! ", "yellow"), w.message))
    return ExitCode.OK


def cmd_tui(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("textual") is None:
        from advisor.core.errors import UsageError

        raise UsageError("the wizard needs the textual package: pip install textual")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):  # it would wait for keys that never come
        from advisor.core.errors import UsageError

        raise UsageError("the wizard needs a terminal (stdin and stdout); without one, use advisor recommend")
    if args.model:  # a bad --model is one line here, as in recommend, not an error on a tab the app does not show
        from advisor.app.api import profile_model

        profile_model(args.model, args.task)
    from tui.app import run as run_tui

    return run_tui(model=args.model, out_dir=args.out, **collect(args, HardwareOptions),
                   **collect(args, WorkloadOptions), **collect(args, MethodOptions), **collect(args, StackOptions))


def cmd_rules(args: argparse.Namespace) -> int:
    from rules import REGISTRY, info

    infos = [info(r) for r in REGISTRY.values()]
    if args.json:
        sys.stdout.write(json.dumps([i.model_dump() for i in infos], indent=2) + "\n")
    else:
        from advisor.app.report import rules_table

        _console().print(rules_table(infos))
    return ExitCode.OK


def cmd_schema(args: argparse.Namespace) -> int:
    from advisor.app.api import Estimate
    from advisor.app.compare import Comparison
    from advisor.engine.recommendation import Recommendation
    from advisor.engine.schema import SCHEMA_VERSION
    from advisor.measure.validation import ValidationReport
    from probes.hardware import HardwareProfile
    from probes.model import ModelProfile

    schemas = {name: model.model_json_schema() for name, model in
               (("Recommendation", Recommendation), ("Estimate", Estimate), ("ValidationReport", ValidationReport),
                ("HardwareProfile", HardwareProfile), ("ModelProfile", ModelProfile), ("Comparison", Comparison))}
    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, "schemas": schemas}, indent=2) + "\n")
    return ExitCode.OK


def _workload_args(p: argparse.ArgumentParser, *, model_help: str | None = None, model_required: bool = True,
                   objective: bool = True, helps: dict[str, str] | None = None, calibration: bool = True) -> None:
    """--model, --task, the hardware flags and the workload flags (``helps``: a workload flag's help for this
    command); ``calibration``: --no-local-calibration."""
    add_arguments(p, ModelOptions, required=("model",) if model_required else (),
                  helps={"model": model_help} if model_help else None)
    add_arguments(p, HubOptions)
    add_arguments(p, WorkloadOptions, ("task",))
    add_arguments(p, HardwareOptions)
    add_arguments(p, WorkloadOptions, ("seq_len", "global_batch_size") + (("objective",) if objective else ())
                  + ("from_scratch", "mean_sample_len"), helps=helps)
    if calibration:
        add_arguments(p, CalibrationOption)


def _stack_args(p: argparse.ArgumentParser) -> None:
    """The software-stack options of recommend and the wizard (values the planner must use), and --liger-kernel."""
    group = p.add_argument_group("software stack (default: the planner's choice among what is installed)")
    add_arguments(group, StackOptions)
    _liger_alias(group)


def _liger_alias(group) -> None:
    """``--liger-kernel``: the issue's spelling of ``--loss-kernel liger``."""
    group.add_argument("--liger-kernel", dest="loss_kernel", action="store_const", const=LossKernel.LIGER.value,
                       help="same as --loss-kernel liger (default: off)")


def _add_estimate(sub) -> None:
    """``advisor estimate``: the workload flags and every plan setting."""
    p = sub.add_parser("estimate", help="memory and speed of one given plan", epilog=EXIT_CODES_HELP)
    _workload_args(p, objective=False, helps={"global_batch_size": (
        "samples per optimizer step: sets the accumulation that makes it over the data-parallel GPUs (or, with "
        "--gradient-accumulation-steps alone, the micro-batch) (default: micro-batch x accumulation x data-parallel "
        "GPUs)")})
    group = p.add_argument_group("plan settings (default: the hardware's precision and tf32, ddp over several GPUs)")
    # the batch flags get no parser default: the API must see which of them --global-batch-size may set
    batch = BATCH
    add_arguments(group, PlanOptions, PLAN_FLAGS, unset="chosen for the hardware",
                  defaults={k: v for k, v in ESTIMATE_DEFAULTS.items() if k not in batch},
                  helps={k: f"{PlanOptions.model_fields[k].description} (default: {ESTIMATE_DEFAULTS[k]}, or what "
                            "--global-batch-size makes)" for k in batch})
    _liger_alias(group)
    add_arguments(p, SimulateOption)
    p.add_argument("--timeline", metavar="FILE", help="draw the simulated step's memory over time by kind, with its "
                   "peak, to FILE.svg or FILE.html (implies --simulate; default: none)")
    p.add_argument("--json", action="store_true", help="print JSON (default: off)")
    p.set_defaults(func=cmd_estimate)


def _add_probe(sub) -> None:
    """``advisor probe``: the hardware options, --measure-context and --json."""
    p = sub.add_parser("probe", help="the hardware: GPUs (NVML), links, host", epilog=EXIT_CODES_HELP)
    add_arguments(p, HardwareOptions)
    p.add_argument("--measure-context", action="store_true", help="measure the CUDA context on this machine's GPU "
                   "(imports torch: seconds; default: off, priced by --cuda-version)")
    p.add_argument("--json", action="store_true", help="print JSON (default: off)")
    p.set_defaults(func=cmd_probe)


def build_parser() -> argparse.ArgumentParser:
    """The ``advisor`` parser: every flag made from the declarations in :mod:`advisor.app.options`."""
    from advisor.app.compare import parse_tokens
    from advisor.app.emit import EMIT_HELP, TARGETS

    parser = _Parser(prog="advisor", description="How to train a PyTorch / Hugging Face model fastest on your "
                                                 "hardware, with every choice explained and sourced.",
                     epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version="advisor 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    _add_probe(sub)
    p = sub.add_parser("profile", help="a model's facts from its config.json", epilog=EXIT_CODES_HELP)
    add_arguments(p, ModelOptions, required=("model",))
    add_arguments(p, HubOptions)
    add_arguments(p, WorkloadOptions, ("task",))
    p.add_argument("--json", action="store_true", help="print JSON (default: off)")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("recommend", help="the fastest training plan that fits, explained", epilog=EXIT_CODES_HELP)
    _workload_args(p)
    add_arguments(p.add_argument_group("what to train"), MethodOptions)
    _stack_args(p)
    p.add_argument("--json", action="store_true", help="print the recommendation as JSON (default: off)")
    p.add_argument("--explain", action="store_true",
                   help="the full report: every setting's reasons, rule ids, numbered sources and every alternative "
                        "that lost (default: off: a plan card that fits 80 x 24)")
    p.add_argument("--emit", action="append", choices=(*TARGETS, "all"), metavar="TARGET", help=EMIT_HELP)
    p.add_argument("--out", default=".", metavar="DIR", help="folder for --emit files (default: .)")
    p.add_argument("--tokens", type=parse_tokens, metavar="N", help="with --emit: train on N tokens (max_steps: N over "
                   "the plan's tokens per step) (default: 3 epochs, as the recipes the learning rate comes from)")
    p.set_defaults(func=cmd_recommend)

    from advisor.app.compare import add_parser as add_compare
    from advisor.app.validate_command import add_parser as add_validate

    from advisor.app.runs_command import add_parser as add_runs

    add_compare(sub, EXIT_CODES_HELP)
    add_runs(sub, EXIT_CODES_HELP)
    _add_estimate(sub)
    add_validate(sub, EXIT_CODES_HELP)

    p = sub.add_parser("tui", help="the terminal wizard (the options of recommend; with --model it opens on "
                                   "the recommendation)", epilog=EXIT_CODES_HELP)
    _workload_args(p, model_required=False, calibration=False)
    add_arguments(p.add_argument_group("what to train"), MethodOptions)
    _stack_args(p)
    p.add_argument("--out", default=WIZARD_OUT_DIR, metavar="DIR", help="the export step's folder (default: %(default)s)")
    p.set_defaults(func=cmd_tui)

    p = sub.add_parser("rules", help="the knowledge base: every rule and its sources")
    p.add_argument("--json", action="store_true", help="print JSON (default: off)")
    p.set_defaults(func=cmd_rules)

    sub.add_parser("schema", help="JSON Schema of the machine-readable outputs").set_defaults(func=cmd_schema)
    return parser


def run(argv: list[str] | None = None, handler: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Parse and run; return the exit code (errors become one stderr line)."""
    parser = build_parser()
    args = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None else list(argv)))
    try:
        if getattr(args, "hub_timeout_s", None) is not None:  # the probe reads it (the API's users set it too)
            from advisor.app.options import parse

            os.environ["ADVISOR_HUB_TIMEOUT"] = repr(parse(HubOptions, collect(args, HubOptions)).hub_timeout_s)
        code = int((handler or args.func)(args))
        sys.stdout.flush()  # a full or closed stdout fails here, not at exit
        return code
    except AdvisorError as err:
        sys.stderr.write(f"advisor: error: {shown(err, MAX_LINE)}\n")  # one line, whatever a file said
        return int(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("advisor: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        silence_stdout()
        return int(ExitCode.OK)
    except OSError as err:
        if err.errno not in WRITE_ERRNOS:
            return _internal(err)
        silence_stdout()
        sys.stderr.write(f"advisor: error: cannot write the output: {err.strerror}\n")
        return int(ExitCode.OUTPUT)
    except Exception as err:  # a bug: one line, the traceback only on request
        return _internal(err)


def _internal(err: Exception) -> int:
    if os.environ.get("ADVISOR_DEBUG"):
        raise err
    sys.stderr.write(f"advisor: internal error: {type(err).__name__}: {shown(err, MAX_LINE)} "
                     "(ADVISOR_DEBUG=1 shows the traceback; please report it)\n")
    return int(ExitCode.INTERNAL)


if __name__ == "__main__":  # the command itself starts at advisor.app.entry.main (safe streams, Ctrl-C in imports)
    sys.exit(run())
