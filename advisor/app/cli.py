"""The ``advisor`` command line: one function per command; errors mapped to exit codes in one place.

Data goes to stdout, diagnostics to stderr. Exit codes: :class:`probes.errors.ExitCode`.
This module imports neither torch, transformers nor textual.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from typing import Callable, NoReturn

from probes.errors import AdvisorError, ExitCode, NoFitError
from probes.model import TASKS

TASK_CHOICES = TASKS
EXIT_CODES_HELP = "exit codes: " + ", ".join(f"{c.value} {c.name.lower().replace('_', '-')}" for c in ExitCode)


class _Parser(argparse.ArgumentParser):
    """argparse, with one-line errors and the documented usage exit code."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"advisor: error: {message} (see `{self.prog} --help`)\n")
        sys.exit(ExitCode.USAGE)


def _positive_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, width=None if sys.stdout.isatty() else 160)


def _print_json(model) -> None:
    sys.stdout.write(model.model_dump_json(indent=2) + "\n")


def cmd_probe(args: argparse.Namespace) -> int:
    from advisor.app.api import probe_hardware

    if args.gpu and args.gpu.strip().lower() == "list":
        return _list_gpus(args)
    hw = probe_hardware(args.gpu, args.nodes, args.interconnect, args.inter_node_gbps)
    if args.json:
        _print_json(hw)
    else:
        from advisor.app.report import hardware_table

        _console().print(hardware_table(hw))
    return ExitCode.OK


def _list_gpus(args: argparse.Namespace) -> int:
    from probes.gpu_catalog import catalog

    entries = list(catalog().values())
    if args.json:
        sys.stdout.write(json.dumps([e.model_dump() for e in entries], indent=2) + "\n")
        return ExitCode.OK
    from rich.table import Table

    t = Table(title="GPU catalog (--gpu NAME[:COUNT])", title_justify="left")
    for col in ("name", "GPU", "cc", "memory", "fp32", "tf32", "bf16/fp16", "bandwidth", "NVLink"):
        t.add_column(col)
    for e in entries:
        p = e.peak_tflops
        t.add_row(e.id, e.name, e.compute_capability, f"{e.memory_gib:g} GiB", f"{p.fp32:g}",
                  f"{p.tf32:g}" if p.tf32 else "—", f"{(p.bf16 or p.fp16):g}", f"{e.memory_bandwidth_gbps:g} GB/s",
                  f"{e.nvlink_bandwidth_gbps:g} GB/s" if e.nvlink_bandwidth_gbps else "—")
    _console().print(t)
    return ExitCode.OK


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

    try:
        rec = recommend(args.model, task=args.task, gpu=args.gpu, nodes=args.nodes, seq_len=args.seq_len,
                        global_batch_size=args.global_batch_size, objective=args.objective,
                        interconnect=args.interconnect, inter_node_gbps=args.inter_node_gbps)
    except NoFitError as err:
        if args.json:
            closest = err.closest
            from advisor.engine.recommendation import SCHEMA_VERSION

            payload = {"schema_version": SCHEMA_VERSION, "fits": False, "error": str(err), "suggestions": err.suggestions,
                       "closest_plan": closest.plan.model_dump() if closest else None,
                       "closest_memory": closest.memory.model_dump() if closest else None}
            sys.stdout.write(json.dumps(payload, indent=2) + "\n")
            sys.stderr.write(f"advisor: {err.summary}\n")
            return err.exit_code
        raise
    if args.emit:
        from advisor.app.emit import emit

        for path in emit(rec, args.emit, args.out):
            sys.stderr.write(f"advisor: wrote {path}\n")
    if args.json:
        _print_json(rec)
    else:
        from advisor.app.report import print_recommendation

        print_recommendation(rec, _console())
    return ExitCode.OK


def cmd_estimate(args: argparse.Namespace) -> int:
    from advisor.app.api import estimate

    est = estimate(args.model, task=args.task, gpu=args.gpu, nodes=args.nodes, seq_len=args.seq_len,
                   micro_batch_size=args.micro_batch_size, gradient_accumulation_steps=args.gradient_accumulation_steps,
                   precision=args.precision, tf32=args.tf32, optimizer=args.optimizer,
                   gradient_checkpointing=args.gradient_checkpointing, parallelism=args.parallelism,
                   offload=args.offload, simulate=args.simulate, interconnect=args.interconnect,
                   inter_node_gbps=args.inter_node_gbps, tensor_parallel=args.tensor_parallel,
                   pipeline_parallel=args.pipeline_parallel)
    if args.json:
        keys = {"schema_version", "plan", "memory", "speed"} | ({"simulated"} if args.simulate else set())
        sys.stdout.write(est.model_dump_json(indent=2, include=keys) + "\n")
    else:
        from advisor.app.report import memory_table, speed_table

        console = _console()
        p = est.plan
        console.print(f"[bold]{est.model.id}[/]: {p.precision}{' + tf32' if p.tf32 else ''}, {p.optimizer}, "
                      f"micro-batch {p.micro_batch_size} x {p.gradient_accumulation_steps} accumulation, "
                      f"seq-len {est.workload.seq_len}, checkpointing {'on' if p.gradient_checkpointing else 'off'}, "
                      f"{p.parallelism} on {p.num_gpus or 'the CPU'}{' GPU(s)' if p.num_gpus else ''}"
                      + (f", tensor parallel {p.tensor_parallel} x pipeline parallel {p.pipeline_parallel}"
                         if p.model_parallel_size > 1 else ""))
        console.print(memory_table(est.memory))
        if est.simulated:
            sim = est.simulated
            console.print(f"Simulated step (fake tensors, {sim.wall_s:.1f} s): peak {sim.peak_bytes / 2**30:.2f} GiB "
                          f"in the {sim.peak_phase}, device {sim.device_bytes / 2**30:.2f} GiB; the analytic peak is "
                          f"{sim.analytic_error:+.1%} off")
        console.print(speed_table(est.speed))
    return ExitCode.OK


def _read_plan(path: str):
    """The plan (and sequence length) of a recommend / estimate / validate JSON file."""
    from pydantic import ValidationError

    from probes.errors import UsageError
    from rules import Plan

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as err:
        raise UsageError(f"cannot read --plan {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"--plan {path} is not JSON: {err.msg} at line {err.lineno}") from None
    raw = data.get("plan") or data.get("confirmed_plan") if isinstance(data, dict) else None
    if raw is None:
        raise UsageError(f"--plan {path} has no 'plan' (the JSON of advisor recommend / estimate / validate)")
    try:
        plan = Plan.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        raise UsageError(f"--plan {path}: plan.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    seq_len = (data.get("workload") or {}).get("seq_len")
    return plan, seq_len if isinstance(seq_len, int) else None


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def _size(text: str) -> int:
    """'2GiB', '512MiB', '1.5GB' or a number of bytes."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (e.g. 2GiB, 512MiB, 1.5GB or bytes)")
    value = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' must be more than 0 bytes")
    return value


class _Progress:
    """The validator's progress on stderr: a rich bar with the live step time and memory on a
    terminal, one line per step otherwise."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = _console(stderr=True)
        self.live = self.console.is_terminal
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=self.console,
                            disable=not self.live, transient=False)
        self.task = None
        self.index = 0

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def __call__(self, event) -> None:
        from advisor.measure.trial import StepUpdate
        from advisor.measure.validation import Trial, TrialStarted, describe

        if isinstance(event, TrialStarted):
            self.index = event.index
            about = event.predicted_step_time_s * event.total_steps
            self.console.print(f"advisor: trial {event.index} ({event.role}): {describe(event.plan)}; predicted "
                               f"{event.predicted_step_time_s:.3g} s/step, about {about:.0f} s for "
                               f"{event.total_steps} steps", highlight=False)
            if about > 300 and event.index == 1:
                self.console.print("advisor: that is long for a trial: --steps, --seq-len or --global-batch-size "
                                   "make it shorter", highlight=False)
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


def cmd_validate(args: argparse.Namespace) -> int:
    import signal
    import threading

    from advisor.app.api import validate
    from advisor.app.files import write_atomic

    plan, seq_len = _read_plan(args.plan) if args.plan else (None, None)
    stop = threading.Event()

    def on_sigint(signum, frame) -> None:
        if stop.is_set():  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        stop.set()
        sys.stderr.write("advisor: stopping at the next step boundary (Ctrl-C again to stop now)\n")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with _Progress() as progress:
            report = validate(args.model, task=args.task, seq_len=args.seq_len or seq_len,
                              global_batch_size=args.global_batch_size, plan=plan,
                              micro_batch_size=args.micro_batch_size,
                              gradient_accumulation_steps=args.gradient_accumulation_steps, precision=args.precision,
                              tf32=args.tf32, optimizer=args.optimizer,
                              gradient_checkpointing=args.gradient_checkpointing, steps=args.steps,
                              warmup=args.warmup, compare=args.compare, memory_limit_bytes=args.memory_limit,
                              max_trials=args.max_trials, progress=progress, stop=stop, nproc=args.nproc,
                              parallelism=args.parallelism)
    finally:
        signal.signal(signal.SIGINT, previous)
    text = report.model_dump_json(indent=2) + "\n"
    if args.output:
        write_atomic(args.output, text)
        sys.stderr.write(f"advisor: wrote {args.output}\n")
    if args.json:
        sys.stdout.write(text)
    else:
        from advisor.app.report import validation_tables

        _console().print(validation_tables(report))
    if report.interrupted:
        return ExitCode.INTERRUPTED
    return ExitCode.VALIDATION_FAILED if report.verdict == "failed" else ExitCode.OK


def cmd_tui(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("textual") is None:
        from probes.errors import UsageError

        raise UsageError("the wizard needs the textual package: pip install textual")
    from tui.app import run as run_tui

    return run_tui(model=args.model, task=args.task, gpu=args.gpu, nodes=args.nodes, seq_len=args.seq_len,
                   global_batch_size=args.global_batch_size, objective=args.objective, out_dir=args.out,
                   interconnect=args.interconnect, inter_node_gbps=args.inter_node_gbps)


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
    from advisor.engine.recommendation import SCHEMA_VERSION, Recommendation
    from advisor.measure.validation import ValidationReport
    from probes.hardware import HardwareProfile
    from probes.model import ModelProfile

    schemas = {name: model.model_json_schema() for name, model in
               (("Recommendation", Recommendation), ("Estimate", Estimate), ("ValidationReport", ValidationReport),
                ("HardwareProfile", HardwareProfile), ("ModelProfile", ModelProfile))}
    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, "schemas": schemas}, indent=2) + "\n")
    return ExitCode.OK


def _hardware_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", metavar="NAME[:COUNT]",
                   help="plan for catalog GPUs instead of this machine's (`advisor probe --gpu list` lists them)")
    p.add_argument("--nodes", type=_positive_int, default=1, metavar="N", help="identical nodes (default 1)")
    p.add_argument("--interconnect", metavar="LINKS",
                   help="nvlink or pcie inside a node, infiniband (200 Gb/s) or ethernet (100 Gb/s) between nodes; "
                        "comma-separated, e.g. pcie,ethernet")
    p.add_argument("--inter-node-gbps", type=float, metavar="Gb/s",
                   help="network bandwidth between nodes per node, gigabits per second")


def _workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="ID_OR_PATH",
                   help="Hub id (gpt2), a folder with config.json, or a config.json path")
    p.add_argument("--task", choices=TASK_CHOICES, help="task head (default: from the config's architectures)")
    _hardware_args(p)
    p.add_argument("--seq-len", type=_positive_int, metavar="L",
                   help="tokens per sample (default: min(model max positions, 1024))")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="advisor", description="How to train a PyTorch / Hugging Face model fastest on your "
                                                 "hardware, with every choice explained and sourced.",
                     epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version="advisor 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("probe", help="the hardware: GPUs (NVML), links, host", epilog=EXIT_CODES_HELP)
    _hardware_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("profile", help="a model's facts from its config.json", epilog=EXIT_CODES_HELP)
    p.add_argument("--model", required=True, metavar="ID_OR_PATH")
    p.add_argument("--task", choices=TASK_CHOICES)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("recommend", help="the fastest training plan that fits, explained", epilog=EXIT_CODES_HELP)
    _workload_args(p)
    p.add_argument("--global-batch-size", type=_positive_int, metavar="B",
                   help="samples per optimizer step (default 64)")
    p.add_argument("--objective", choices=("speed", "memory"), default="speed",
                   help="what matters most: the fastest plan that fits (default) or the least device memory")
    p.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    p.add_argument("--emit", action="append", choices=("hf", "accelerate", "deepspeed", "torchrun", "all"),
                   metavar="TARGET", help="also write ready-to-run configs: hf (training_args.json), accelerate "
                                          "(accelerate_config.yaml), deepspeed (ds_config.json, ZeRO plans), "
                                          "torchrun (launch.sh) or all; repeatable")
    p.add_argument("--out", default=".", metavar="DIR", help="folder for --emit files (default: .)")
    p.set_defaults(func=cmd_recommend)

    p = sub.add_parser("estimate", help="memory and speed of one given plan", epilog=EXIT_CODES_HELP)
    _workload_args(p)
    p.add_argument("--micro-batch-size", type=_positive_int, default=1, metavar="b")
    p.add_argument("--gradient-accumulation-steps", type=_positive_int, default=1, metavar="k")
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"))
    p.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--optimizer", choices=("adamw", "adafactor", "adamw-8bit", "sgd"), default="adamw")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--parallelism", choices=("ddp", "zero-1", "zero-2", "zero-3", "fsdp-shard-grad-op",
                                             "fsdp-full-shard", "fsdp-hybrid-shard"))
    p.add_argument("--offload", choices=("none", "optimizer", "optimizer+parameters"), default="none")
    p.add_argument("--tensor-parallel", type=_positive_int, default=1, metavar="T",
                   help="split each layer over T GPUs of a node (Megatron-style)")
    p.add_argument("--pipeline-parallel", type=_positive_int, default=1, metavar="P",
                   help="split the layers into P pipeline stages (1F1B)")
    p.add_argument("--simulate", action="store_true",
                   help="also run a real training step on fake tensors (imports torch; seconds)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("validate", help="short trial steps of the plan on this machine: confirm or correct it",
                       epilog=EXIT_CODES_HELP)
    p.add_argument("--model", required=True, metavar="ID_OR_PATH",
                   help="Hub id (gpt2), a folder with config.json (its weights are used when present), or a "
                        "config.json path")
    p.add_argument("--task", choices=TASK_CHOICES, help="task head (default: from the config's architectures)")
    p.add_argument("--seq-len", type=_positive_int, metavar="L",
                   help="tokens per sample (default: the --plan file's, else min(model max positions, 1024))")
    p.add_argument("--global-batch-size", type=_positive_int, metavar="B",
                   help="samples per optimizer step (default 64)")
    p.add_argument("--plan", metavar="FILE", help="validate the plan of a recommend / estimate / validate JSON file")
    plan_group = p.add_argument_group("plan settings (override this machine's recommendation)")
    plan_group.add_argument("--micro-batch-size", type=_positive_int, metavar="b")
    plan_group.add_argument("--gradient-accumulation-steps", type=_positive_int, metavar="k")
    plan_group.add_argument("--precision", choices=("fp32", "fp16", "bf16"))
    plan_group.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None)
    plan_group.add_argument("--optimizer", choices=("adamw", "adafactor", "adamw-8bit", "sgd"))
    plan_group.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None)
    plan_group.add_argument("--parallelism", choices=("ddp", "zero-2", "zero-3", "fsdp-shard-grad-op",
                                                      "fsdp-full-shard"),
                            help="several processes: DDP, or FSDP as ZeRO-2 (SHARD_GRAD_OP) / ZeRO-3 (FULL_SHARD)")
    p.add_argument("--nproc", type=_positive_int, metavar="N",
                   help="CPU only: a distributed trial over N processes (torchrun, gloo); the global batch is split")
    p.add_argument("--steps", type=_positive_int, default=10, metavar="N", help="timed steps per trial (default 10)")
    p.add_argument("--warmup", type=_positive_int, default=2, metavar="N",
                   help="untimed warm-up steps per trial (default 2)")
    p.add_argument("--compare", action="store_true",
                   help="also run the baseline (fp32, no checkpointing, AdamW, same global batch)")
    p.add_argument("--memory-limit", type=_size, metavar="SIZE",
                   help="hold the trials to less memory than the device has, e.g. 8GiB")
    p.add_argument("--max-trials", type=_positive_int, default=6, metavar="N",
                   help="most trials, corrections included (default 6; the baseline has its own)")
    p.add_argument("--output", metavar="FILE", help="also write the report's JSON to FILE (atomically)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("tui", help="the terminal wizard (the options of recommend; with --model it opens on "
                                   "the recommendation)", epilog=EXIT_CODES_HELP)
    p.add_argument("--model", metavar="ID_OR_PATH", help="Hub id, a folder with config.json, or a config.json path")
    p.add_argument("--task", choices=TASK_CHOICES)
    _hardware_args(p)
    p.add_argument("--seq-len", type=_positive_int, metavar="L")
    p.add_argument("--global-batch-size", type=_positive_int, metavar="B")
    p.add_argument("--objective", choices=("speed", "memory"), default="speed")
    p.add_argument("--out", default="advisor-config", metavar="DIR", help="the export step's folder")
    p.set_defaults(func=cmd_tui)

    p = sub.add_parser("rules", help="the knowledge base: every rule and its sources")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_rules)

    p = sub.add_parser("schema", help="JSON Schema of the machine-readable outputs")
    p.set_defaults(func=cmd_schema)
    return parser


def run(argv: list[str] | None = None, handler: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Parse and run; return the exit code (errors become one stderr line)."""
    args = build_parser().parse_args(argv)
    try:
        return int((handler or args.func)(args))
    except AdvisorError as err:
        sys.stderr.write(f"advisor: error: {err}\n")
        return int(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("advisor: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as err:  # a bug: one line, the traceback only on request
        if os.environ.get("ADVISOR_DEBUG"):
            raise
        sys.stderr.write(f"advisor: internal error: {type(err).__name__}: {err} "
                         "(ADVISOR_DEBUG=1 shows the traceback; please report it)\n")
        return int(ExitCode.INTERNAL)


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of the ``advisor`` script."""
    sys.exit(run(argv))


if __name__ == "__main__":
    main()
