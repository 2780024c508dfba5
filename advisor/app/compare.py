"""``advisor compare``: the best plan of one workload on each of several GPUs (default: the whole catalog),
with the time to train on a number of tokens and, given prices, the cost. "Which GPU should I use?"

The planner runs once per GPU, without the explanation of every alternative that ``recommend`` builds (the
table needs the best plan and its estimates only). Prices are the user's (``--price-per-hour NAME=USD``, per GPU
per hour): no price list is shipped, since on-demand prices differ several times over between providers and
change by the month. No torch, transformers or textual.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.engine.local_calibration import LocalCalibration
from advisor.engine.schema import SCHEMA_VERSION
from advisor.core.errors import UsageError
from advisor.core.limits import MAX_TOKENS
from advisor.core.units import GIB, count, duration
from rules import Plan, Workload

#: ``--tokens``' default: a billion tokens, the unit of the cost column.
DEFAULT_TOKENS = 1_000_000_000
SORT_KEYS = ("time", "cost")


class CompareRow(BaseModel):
    """One GPU (× count) of the comparison and its best plan."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    gpu: str
    """the catalog id as asked, NAME[:COUNT]"""
    gpu_name: str
    """the GPU's full name"""
    num_gpus: int
    """GPUs in all (count × nodes)"""
    fits: bool
    """some plan fits"""
    plan: Plan | None = None
    """the best plan (None when nothing fits)"""
    device_bytes: int
    """the best plan's device memory per GPU, or the smallest plan's when nothing fits, bytes"""
    usable_bytes: int
    """the memory a plan may use per GPU, bytes"""
    step_time_s: float | None = None
    """estimated seconds per optimizer step"""
    tokens_per_s: float | None = None
    """estimated tokens per second, all GPUs"""
    time_s: float | None = None
    """estimated seconds to train on the comparison's tokens"""
    price_per_gpu_hour_usd: float | None = None
    """the price given for one of these GPUs for an hour, US dollars"""
    cost_per_billion_tokens_usd: float | None = None
    """estimated cost of a billion tokens at that price, all GPUs, US dollars"""
    local_calibration: LocalCalibration | None = None
    """the correction of the runs measured on this GPU model, when applied to its speed (advisor runs)"""


class Comparison(BaseModel):
    """What ``advisor compare --json`` prints."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    schema_version: str = SCHEMA_VERSION
    """MAJOR.MINOR of this JSON's schema"""
    model: str
    """the model's id"""
    workload: Workload
    """sequence length and global batch size (the same on every GPU)"""
    tokens: int
    """the tokens the time column is for"""
    sort: Literal["time", "cost"]
    """the rows' order: shortest time first, or cheapest first (rows without a price after, by time)"""
    rows: list[CompareRow] = Field(description="one row per GPU (× count), best first; rows where nothing fits last")


def parse_prices(items: list[str] | None) -> dict[str, float]:
    """``NAME=USD`` items as {catalog id: USD per GPU hour}.

    Raises:
        UsageError: not NAME=USD, a negative, non-numeric or infinite price (nan, inf), or an unknown GPU.
    """
    from probes.gpu_catalog import catalog

    prices: dict[str, float] = {}
    for item in items or []:
        name, sep, usd = item.partition("=")
        name = name.strip().lower()
        try:
            value = float(usd)
        except ValueError:
            value = math.nan
        if not sep or not (math.isfinite(value) and value >= 0):  # nan, inf and 1e400 are not prices
            raise UsageError(f"--price-per-hour {item!r}: expected NAME=USD, e.g. a100-80gb=1.79 (US dollars per GPU "
                             "per hour)")
        if name not in catalog():
            raise UsageError(f"--price-per-hour {item!r}: unknown GPU {name!r} (advisor probe --gpu list)")
        if name in prices and prices[name] != value:  # which one was meant cannot be told: never keep one silently
            raise UsageError(f"--price-per-hour {item!r}: {name} was already priced at {prices[name]:g} USD: give "
                             "one price per GPU")
        prices[name] = value
    return prices


def _row(profile, spec: str, opts: dict[str, Any], tokens: int,
         prices: dict[str, float]) -> tuple[CompareRow, Workload, UsageError | None]:
    """One GPU's row, its workload, and why no plan can run there when the settings rule every layout out (as
    :func:`advisor.engine.legality.no_layout_error` says it; None otherwise)."""
    from advisor.app import api
    from advisor.app.local_runs import calibrate
    from advisor.engine import planner
    from advisor.engine.candidates import nothing_fits
    from advisor.engine.legality import no_layout_error

    facts = api._facts(profile, api.parse(api._options(*api._RECOMMEND), {**opts, "gpu": spec}), None)
    result = planner.search(facts, best_only=True)
    hw = facts.hardware
    price = prices.get(hw.gpu.catalog_id)  # the catalog's id, as parse_prices keys them
    best = result.best
    if best is None:
        closest = min(result.candidates, key=lambda c: c.memory.device_bytes, default=None)  # None: none can run
        refused = (no_layout_error(facts, result.effects) if closest is None and not nothing_fits(facts) else None)
        return CompareRow(gpu=spec, gpu_name=hw.gpu.name, num_gpus=hw.num_gpus, fits=False,
                          device_bytes=closest.memory.device_bytes if closest else 0,
                          usable_bytes=closest.memory.usable_bytes if closest else 0,
                          price_per_gpu_hour_usd=price), facts.workload, refused
    speed = calibrate(best.speed, best.plan, hw, bool(opts.get("no_local_calibration")))  # the runs measured here
    tps = speed.tokens_per_s
    cost = price * hw.num_gpus * DEFAULT_TOKENS / tps / 3600 if price is not None else None
    return CompareRow(gpu=spec, gpu_name=hw.gpu.name, num_gpus=hw.num_gpus, fits=True, plan=best.plan,
                      device_bytes=best.memory.device_bytes, usable_bytes=best.memory.usable_bytes,
                      step_time_s=speed.step_time_s, tokens_per_s=tps, time_s=tokens / tps,
                      price_per_gpu_hour_usd=price, cost_per_billion_tokens_usd=cost,
                      local_calibration=speed.local_calibration), facts.workload, None


def _check_arguments(gpus: object, tokens: object, prices: object) -> None:
    """The API's arguments of the wrong type, in the words of the command line's checks.

    Raises:
        UsageError: ``gpus`` not a list of ``NAME[:COUNT]`` strings, ``tokens`` not a whole number, ``prices`` not a
            mapping of GPU ids to finite US dollars >= 0.
    """
    if gpus is not None and (isinstance(gpus, str) or not isinstance(gpus, (list, tuple))
                             or not all(isinstance(g, str) for g in gpus)):
        raise UsageError(f"gpus must be a list of NAME[:COUNT] strings (e.g. ['a100-80gb:8']), got {gpus!r:.80}")
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise UsageError(f"--tokens must be a whole number of tokens, got {tokens!r:.80}")
    if prices is not None and not isinstance(prices, dict):
        raise UsageError(f"prices must map GPU ids to US dollars per GPU hour, got {type(prices).__name__}")
    bad = [f"{name}={usd}" for name, usd in (prices or {}).items()
           if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not (math.isfinite(usd) and usd >= 0)]
    if bad:  # the API's prices, as the command line's are checked
        raise UsageError(f"--price-per-hour {bad[0]}: expected a finite number of US dollars per GPU per hour, >= 0")


def compare(model: str, *, gpus: list[str] | None = None, tokens: int = DEFAULT_TOKENS,
            prices: dict[str, float] | None = None, sort: str = "time",
            progress: Callable[[int, int, str], None] | None = None, **options: Any) -> Comparison:
    """The best plan of ``model`` on each of ``gpus`` (``NAME[:COUNT]``; default: one of every catalog GPU).

    ``options``: the workload and method options of :func:`advisor.app.api.recommend` and ``nodes`` /
    ``interconnect`` / ``inter_node_gbps`` / ``host_memory_bytes``; ``prices``: USD per GPU hour by catalog id;
    ``progress(done, total, gpu)`` is called before each GPU and once at the end (``done == total``). The rows
    are ranked per method (:func:`per_method`): under ``--method auto`` each method's rows together, best first.

    Raises:
        UsageError: tokens outside 1..:data:`advisor.core.limits.MAX_TOKENS`, an unknown sort, a bad option, a price that
            is not a finite number >= 0 or that is for a GPU not compared.
        UnknownGPUError: an unknown GPU. ModelNotFoundError, BadConfigError: from the model's profile.
    """
    from advisor.app.api import profile_model
    from probes.gpu_catalog import catalog, parse_gpu_spec

    _check_arguments(gpus, tokens, prices)
    if not 1 <= tokens <= MAX_TOKENS:
        raise UsageError(f"--tokens {tokens}: must be from 1 to {MAX_TOKENS:.0e}")
    if sort not in SORT_KEYS:
        raise UsageError(f"--sort {sort}: expected one of {', '.join(SORT_KEYS)}")
    if sort == "cost" and not prices:
        raise UsageError("--sort cost needs prices: --price-per-hour NAME=USD (US dollars per GPU per hour), "
                         "repeatable")
    given = {}  # one row per GPU and count, however often and however spelled it is given (t4, T4, t4:1)
    for spec in gpus or list(catalog()):
        entry, count = parse_gpu_spec(spec)
        given.setdefault((entry.id, count), spec)
    specs = list(given.values())
    names = [name for name, _ in given]
    unused = [name for name in prices or {} if name not in names]
    if unused:  # a price the user gave for a GPU the table will not show: say so rather than drop it
        raise UsageError(f"--price-per-hour {unused[0]}: not among the compared GPUs ({', '.join(names)}): add "
                         f"--gpu {unused[0]}, or leave --gpu out to compare every catalog GPU")
    profile = profile_model(model, options.get("task"))
    rows: list[CompareRow] = []
    workload, refusals = None, []
    for i, spec in enumerate(specs):
        if progress:
            progress(i, len(specs), spec)
        row, workload, refused = _row(profile, spec, options, tokens, prices or {})
        rows.append(row)
        refusals.append(refused)
    if all(refusals):  # no plan can run on any of them (the settings asked for): recommend's line and exit 2
        raise refusals[0]
    if progress:
        progress(len(specs), len(specs), "")

    def key(r: CompareRow) -> tuple:
        time = r.time_s if r.time_s is not None else float("inf")
        if sort == "cost":
            cost = r.cost_per_billion_tokens_usd
            return (not r.fits, cost is None, cost or 0.0, time)
        return (not r.fits, time, r.device_bytes)

    rows.sort(key=key)
    rows = per_method(rows)
    return Comparison(model=profile.id, workload=workload, tokens=tokens, sort=sort, rows=rows)


def per_method(rows: list[CompareRow]) -> list[CompareRow]:
    """``rows`` (ranked) grouped by their plan's method, each group in its rank order and the groups in the order of
    their best row; rows where nothing fits last. Under ``--method auto`` the method may differ between GPUs (full
    fine-tuning on one, LoRA on another), and a LoRA row is not a cheaper way to the same training: a ranking per
    method compares like with like."""
    methods = list(dict.fromkeys(r.plan.method for r in rows if r.plan is not None))
    return sorted(rows, key=lambda r: methods.index(r.plan.method) if r.plan is not None else len(methods))


def comparison_table(c: Comparison, width: int = 160):
    """The comparison as one rich table; from 120 columns up with the memory and the plan in it, narrower with
    each GPU's plan on a line below the table."""
    from rich import box
    from rich.console import Group
    from rich.markup import escape

    from advisor.core.text import shown
    from rich.table import Table
    from rich.text import Text

    priced = any(r.price_per_gpu_hour_usd is not None for r in c.rows)
    wide = width >= 120
    methods = len({r.plan.method for r in c.rows if r.plan is not None}) > 1
    t = Table(title=f"{escape(shown(c.model))}, seq-len {c.workload.seq_len} × batch {c.workload.global_batch_size}: "
                    f"the best plan per GPU, by {c.sort}" + (", ranked per method" if methods else ""),
              title_justify="left", box=box.SIMPLE_HEAD)
    columns = (["GPU"] + (["method"] if methods else []) + ["tokens/s", "step", f"{count(c.tokens)} tokens"]
               + (["$/GPU-h", "$ per 1B"] if priced else []))
    for col in columns + (["memory"] if wide else []):
        t.add_column(col, justify="left" if col in ("GPU", "method") else "right", no_wrap=True)
    if wide:
        t.add_column("plan", overflow="fold")
    for r in c.rows:
        price = [f"{r.price_per_gpu_hour_usd:.2f}" if r.price_per_gpu_hour_usd is not None else "—",
                 f"{r.cost_per_billion_tokens_usd:,.0f}" if r.cost_per_billion_tokens_usd is not None else "—"]
        memory = [f"{r.device_bytes / GIB:.1f}/{r.usable_bytes / GIB:.1f} GiB"] if wide else []
        method = ([r.plan.method if r.plan is not None else "—"] if methods else [])
        if not r.fits:
            t.add_row(r.gpu, *method, "—", "—", "—", *(price if priced else []), *memory,
                      *(["no plan fits"] if wide else []))
            continue
        t.add_row(r.gpu, *method, f"{r.tokens_per_s:,.0f}", f"{r.step_time_s:.2f} s", duration(r.time_s),
                  *(price if priced else []), *memory, *([r.plan.describe()] if wide else []))
    calibrated = [f"{r.gpu}: {r.local_calibration.describe()}" for r in c.rows if r.local_calibration]
    if calibrated:
        t.caption, t.caption_justify = "; ".join(calibrated), "left"
    if wide:
        return t
    plans = Table.grid(padding=(0, 2))
    plans.add_column(no_wrap=True)
    plans.add_column()
    for r in c.rows:
        plans.add_row(r.gpu, r.plan.describe() if r.fits else f"no plan fits: the smallest needs "
                      f"{r.device_bytes / GIB:.1f} GiB of {r.usable_bytes / GIB:.1f} GiB usable")
    return Group(t, Text("plans:", style="bold"), plans)


def stderr_progress() -> Callable[[int, int, str], None] | None:
    """A progress line on stderr (rewritten in place) when stderr is a terminal; None otherwise."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int, gpu: str) -> None:
        line = f"advisor: planning on {gpu} ({done + 1} of {total})" if done < total else ""
        sys.stderr.write(f"\r{line:<60}" + ("\r" if done == total else ""))
        sys.stderr.flush()

    return show


def cmd_compare(args: argparse.Namespace) -> int:
    """``advisor compare``: the table, or the JSON."""
    from advisor.app.options import CalibrationOption, HardwareOptions, MethodOptions, WorkloadOptions, collect
    from advisor.app.progress import console
    from advisor.core.errors import ExitCode

    options = {**collect(args, HardwareOptions), **collect(args, WorkloadOptions), **collect(args, MethodOptions),
               **collect(args, CalibrationOption)}
    options.pop("gpu", None)
    result = compare(args.model, gpus=args.gpu, tokens=args.tokens, prices=parse_prices(args.price_per_hour),
                     sort=args.sort, progress=stderr_progress(), **options)
    if args.json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        from advisor.app.charts import comparison_chart

        out = console()
        out.print(comparison_table(result, out.width))
        out.print(comparison_chart(result, out.width))  # the time (and cost) per GPU as bars, under the table
    return ExitCode.OK


def parse_tokens(text: str) -> int:
    """``--tokens`` (compare's and recommend's): an integer or a float such as 1e9, from 1 to MAX_TOKENS."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value <= MAX_TOKENS:  # NaN fails both comparisons
        raise argparse.ArgumentTypeError(f"{text}: must be from 1 to {MAX_TOKENS:.0e}")
    return int(value)


def add_parser(sub, epilog: str) -> None:
    """``advisor compare``'s flags: the workload and method flags, several GPUs, the tokens, prices and order."""
    from advisor.app.options import (CalibrationOption, HardwareOptions, MethodOptions, ModelOptions, WorkloadOptions,
                                     add_arguments)

    p = sub.add_parser("compare", help="which GPU? the best plan per GPU, time and cost for N tokens",
                       epilog=epilog)
    add_arguments(p, ModelOptions, required=("model",))
    add_arguments(p, WorkloadOptions, ("task",))
    p.add_argument("--gpu", action="append", metavar="NAME[:COUNT]",
                   help="a catalog GPU to compare, repeatable (default: one of every GPU in `advisor probe --gpu list`)")
    add_arguments(p, HardwareOptions, ("nodes", "interconnect", "inter_node_gbps", "host_memory_bytes"))
    add_arguments(p, WorkloadOptions, ("seq_len", "global_batch_size", "objective", "from_scratch",
                                       "mean_sample_len"))
    add_arguments(p.add_argument_group("what to train"), MethodOptions)
    add_arguments(p, CalibrationOption)
    p.add_argument("--tokens", type=parse_tokens, default=DEFAULT_TOKENS, metavar="N",
                   help="training tokens the time column is for (default 1e9 tokens)")
    p.add_argument("--price-per-hour", action="append", metavar="NAME=USD",
                   help="the price of one NAME GPU for an hour, US dollars, e.g. a100-80gb=1.79; repeatable (default: "
                        "none, no cost column: advisor ships no price list)")
    p.add_argument("--sort", choices=SORT_KEYS, default="time",
                   help="order: shortest time first, or cheapest per billion tokens (needs prices) (default time)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON (default: off)")
    p.set_defaults(func=cmd_compare)
