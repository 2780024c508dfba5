"""``advisor runs``: the local store of measured runs (:mod:`advisor.measure.run_store`): list them (a table, or
``--json``), ``export --out DIR`` them in the format of ``benchmarks/published/`` (``DIR/local-runs.jsonl``, to
contribute), ``clear`` the store. No torch, transformers or textual.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from advisor.core.errors import ExitCode, UsageError
from advisor.core.text import MAX_LINE, shown
from advisor.core.units import GIB

EXPORT_FILE = "local-runs.jsonl"
#: Rows the table shows, the newest (``--json`` lists every record read): a terminal's few screens; 10,000 rows took
#: 9 CPU-s to lay out on a 2-core Xeon (issue 44), 100 take a few hundredths of a second.
TABLE_ROWS = 100


def _store():
    from advisor.measure import run_store  # no torch: the app layer reaches measure inside functions

    return run_store


def _read():
    """The store's records; a note on stderr for the lines skipped and for the older lines left unread.

    Raises: UsageError: the store is not a regular file (a FIFO, a device, a folder) or cannot be read."""
    store = _store()
    try:
        runs = store.read()
    except OSError as err:
        raise UsageError(
            f"cannot read the store of runs {shown(store.store_path(), MAX_LINE)}: "
            f"{err.strerror or err} (ADVISOR_HOME sets its folder)"
        ) from None
    if runs.skipped:
        sys.stderr.write(f"advisor: skipped {runs.skipped} malformed line(s) of {shown(runs.path, MAX_LINE)}\n")
    if runs.older:
        sys.stderr.write(
            f"advisor: read the newest {len(runs.records) + runs.skipped:,} line(s) of "
            f"{shown(runs.path, MAX_LINE)}; {runs.older:,} older line(s) left unread\n"
        )
    return runs


def _gib(n: Any) -> str:
    return f"{n / GIB:.2f}" if isinstance(n, (int, float)) else "—"


def _seconds(n: Any) -> str:
    return f"{n:.3f}" if isinstance(n, (int, float)) else "—"


def _plan_words(plan: dict[str, Any]) -> str:
    """The plan in one line (:meth:`Plan.describe`), or its method and parallelism when it no longer parses."""
    from advisor.core.plan import Plan

    try:
        return Plan.model_validate(plan).describe()
    except ValueError:
        return f"{plan.get('method', '?')}, {plan.get('parallelism', '?')}"


def _table(records: list[dict[str, Any]]):
    """The newest :data:`TABLE_ROWS` records as a rich table, its title saying how many more ``--json`` lists."""
    from rich.table import Table

    more = max(len(records) - TABLE_ROWS, 0)
    title = f"measured runs ({len(records):,}" + (f", the newest {TABLE_ROWS} shown: --json lists all" if more else "")
    records = records[more:]
    t = Table(
        title=f"{title}; predicted / measured)",
        title_justify="left",
        caption="peak: max_memory_allocated on a GPU; on the CPU a trial's counted live tensors, a callback's "
        "model states",
        caption_justify="left",
    )
    for col in ("date", "source", "device", "model", "plan", "step s", "tokens/s", "peak GiB"):
        t.add_column(col)
    for r in records:
        p, m = r.get("predicted") or {}, r.get("measured") or {}
        tokens = m.get("tokens_per_s")
        t.add_row(
            shown(str(r.get("date", "—"))[:16]),
            shown(r.get("source", "—")),
            shown((r.get("device") or {}).get("name", "—")),
            shown((r.get("model") or {}).get("id", "—")),
            shown(_plan_words(r.get("plan") or {})),
            f"{_seconds(p.get('step_time_s'))} / {_seconds(m.get('step_time_s'))}",
            f"{tokens:,.0f}" if isinstance(tokens, (int, float)) else "—",
            f"{_gib(p.get('peak_bytes'))} / {_gib(m.get('peak_bytes', m.get('states_bytes')))}",
        )
    return t


def cmd_runs(args: argparse.Namespace) -> int:
    """List the store's records (``--json``: a JSON list)."""
    records = _read().records
    if args.json:
        sys.stdout.write(json.dumps(records, indent=2) + "\n")
        return ExitCode.OK
    if not records:
        sys.stderr.write(
            f"advisor: no measured runs yet in {shown(_store().store_path(), MAX_LINE)} (advisor "
            "validate and advisor.integrations add them)\n"
        )
        return ExitCode.OK
    from advisor.app.progress import console

    console().print(_table(records))
    return ExitCode.OK


def published(record: dict[str, Any], index: int) -> dict[str, Any]:
    """A store record in the format of ``benchmarks/published/*.jsonl`` (``benchmarks/published/README.md``)."""
    plan, device, m = record.get("plan") or {}, record.get("device") or {}, record.get("measured") or {}
    model = record.get("model") or {}
    libraries = record.get("libraries") or {}
    count = plan.get("num_gpus")
    gpus = count if isinstance(count, int) and count > 0 else 1
    tokens = m.get("tokens_per_s")
    peak = m.get("peak_bytes")
    return {
        "id": f"local-{record.get('source', 'run')}-{str(record.get('date', ''))[:10]}-{index}",
        "source": {
            "kind": "local",
            "title": f"advisor {record.get('source', 'run')} on this machine",
            "url": None,
            "where": "advisor runs export",
            "commit": None,
            "quote": None,
        },
        "hardware": {
            "gpu": device.get("name"),
            "count": plan.get("num_gpus") or None,
            "nodes": 1,
            "interconnect": None,
        },
        "model": {"id": model.get("id"), "params": None, "task": model.get("task")},
        "workload": {
            "seq_len": record.get("seq_len"),
            "micro_batch_size": plan.get("micro_batch_size"),
            "gradient_accumulation_steps": plan.get("gradient_accumulation_steps"),
            "global_batch_size": plan.get("global_batch_size"),
        },
        "plan": dict(plan),  # advisor's Plan: every field of the published format's plan, and the rest of the plan
        "stack": {
            "framework": plan.get("framework"),
            "attention": plan.get("attention"),
            "fused_loss": plan.get("loss_kernel"),
            "packing": plan.get("packing"),
            "compile": plan.get("torch_compile"),
            "fp8": plan.get("fp8"),
            "cuda": device.get("cuda"),
            "torch": libraries.get("torch"),
        },
        "measured": {
            "memory_bytes": peak,
            "memory_quantity": "max_memory_allocated" if peak is not None else None,
            "memory_as_written": None,
            "oom": False,
            "samples_per_s": m.get("samples_per_s"),
            "tokens_per_s_per_gpu": tokens / gpus if isinstance(tokens, (int, float)) else None,
            "throughput_as_written": None,
            "mfu": m.get("mfu"),
        },
        "notes": f"measured by advisor ({record.get('source')}, {record.get('date')}); driver "
        f"{device.get('driver')}; libraries {libraries}; predicted {record.get('predicted')}; "
        f"{record.get('notes', '')}".strip(),
    }


def cmd_export(args: argparse.Namespace) -> int:
    """Write the records as ``DIR/local-runs.jsonl`` in the published runs' format.

    Raises: UsageError: ``--out`` exists and is not a folder. OutputError: the file cannot be written."""
    from advisor.app.files import write_atomic

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"runs export --out {out}: not a folder (give the folder to write {EXPORT_FILE} in)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"runs export --out {out}: cannot make the folder: {err.strerror}") from None
    records = _read().records
    text = "".join(json.dumps(published(r, i), sort_keys=False) + "\n" for i, r in enumerate(records, 1))
    path = write_atomic(out / EXPORT_FILE, text)
    sys.stderr.write(f"advisor: wrote {len(records)} run(s) to {shown(path, MAX_LINE)}\n")
    return ExitCode.OK


def cmd_clear(args: argparse.Namespace) -> int:
    """Empty the store.

    Raises: OutputError: the store is not a regular file or cannot be emptied."""
    from advisor.core.errors import OutputError

    try:
        held = _store().clear()
    except OSError as err:
        raise OutputError(
            f"cannot clear the store of runs {shown(_store().store_path(), MAX_LINE)}: {err.strerror or err}"
        ) from None
    sys.stderr.write(f"advisor: cleared {held} run(s) from {shown(_store().store_path(), MAX_LINE)}\n")
    return ExitCode.OK


def add_parser(sub, epilog: str) -> None:
    """``advisor runs [--json] | export --out DIR | clear``."""
    p = sub.add_parser(
        "runs", help="the local store of measured runs (validate trials, the training callback)", epilog=epilog
    )
    p.add_argument("--json", action="store_true", help="print the records as JSON (default: off)")
    p.set_defaults(func=cmd_runs)
    actions = p.add_subparsers(
        dest="runs_action", metavar="ACTION", parser_class=type(p), help="export or clear (default: list the runs)"
    )
    e = actions.add_parser("export", help="write the runs in the format of benchmarks/published/", epilog=epilog)
    e.add_argument("--out", required=True, metavar="DIR", help=f"folder to write {EXPORT_FILE} in")
    e.set_defaults(func=cmd_export)
    actions.add_parser("clear", help="empty the store", epilog=epilog).set_defaults(func=cmd_clear)
