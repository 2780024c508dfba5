"""Shared fixtures: hardware and model facts built in the tests (never live NVML), offline Hub; and the lanes:
a module marked as a whole (``pytestmark = pytest.mark.slow``) is not even imported when ``-m`` deselects every
test it could hold (``make test-fast``), so that its torch / transformers imports do not slow collection."""

from __future__ import annotations

import itertools
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest
from pydantic import TypeAdapter

os.environ["HF_HUB_OFFLINE"] = "1"
# no test reads or writes the user's local store of runs (advisor/measure/run_store.py): an empty folder by default,
# a fresh one per test (the autouse fixture below)
os.environ["ADVISOR_HOME"] = tempfile.mkdtemp(prefix="advisor-home-")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probes.gpu_catalog import profile_from_catalog  # noqa: E402
from probes.hardware import GPULink, HardwareProfile, HostInfo  # noqa: E402
from probes.model import profile_model  # noqa: E402
from rules import Facts, Plan, Workload  # noqa: E402

GIB = 1024**3


def cpu_host(
    cores: int = 8,
    ram_gib: int = 64,
    flags: list[str] | None = None,
    packages: dict[str, str | None] | None = None,
    **stack: str,
) -> HostInfo:
    """``packages``: installed versions by import name, as ``probes.packages.installed_packages`` reports them;
    ``stack``: torch_version, torch_cuda_version, cuda_module_loading as the probe reads them."""
    return HostInfo(
        cpu_cores=cores,
        ram_bytes=ram_gib * GIB,
        cpu_flags=flags or ["avx2", "fma"],
        cpu_mhz=2500.0,
        packages=packages or {},
        **stack,
    )


def hardware(spec: str | dict) -> HardwareProfile:
    """'cpu', a catalog spec 'NAME[:COUNT]', or a dict {gpu: spec, nodes, gpu_overrides, host, links: pcie, given}
    (``given``: HardwareProfile fields as the options set them, e.g. cuda_version)."""
    if isinstance(spec, str):
        spec = {"gpu": spec}
    if spec["gpu"] == "cpu":
        host = spec.get("host") or {}
        return HardwareProfile(source="none", host=cpu_host(**host), notes=["no NVIDIA driver found"])
    hw = profile_from_catalog(spec["gpu"], spec.get("nodes", 1))
    overrides = spec.get("gpu_overrides")
    if overrides is not None:  # {}: as probed (source nvml), unchanged
        hw = hw.model_copy(update={"source": "nvml", "gpus": [g.model_copy(update=overrides) for g in hw.gpus]})
    if "host" in spec:
        hw = hw.model_copy(update={"host": cpu_host(**spec["host"])})
    if spec.get("links") == "pcie":
        hw = hw.model_copy(update={"links": [GPULink(a=link.a, b=link.b, pcie_relation="PHB") for link in hw.links]})
    return hw.model_copy(update=spec["given"]) if spec.get("given") else hw


def facts(
    hw: str | dict = "a100-80gb",
    model: str = "gpt2",
    task: str | None = None,
    seq_len: int = 512,
    global_batch_size: int = 64,
    packages: dict | None = None,
    model_overrides: dict | None = None,
    workload: dict | None = None,
    hardware_overrides: dict | None = None,
) -> Facts:
    profile = profile_model(model, task)
    if model_overrides:  # each value validated as its field's type (a quantization given as a dict, say)
        profile = profile.model_copy(
            update={
                k: TypeAdapter(type(profile).model_fields[k].annotation).validate_python(v)
                for k, v in model_overrides.items()
            }
        )
    hw_profile = hardware(hw)
    if hardware_overrides:
        hw_profile = hw_profile.model_copy(update=hardware_overrides)
    return Facts(
        hardware=hw_profile,
        model=profile,
        workload=Workload(seq_len=seq_len, global_batch_size=global_batch_size, **(workload or {})),
        packages=packages or {},
    )


#: A one-GPU bf16 plan with AdamW and neither checkpointing nor accumulation: the plan the engine's tests build and
#: vary (:func:`cuda_plan`).
PLAN_BASE = dict(
    device="cuda",
    precision="bf16",
    tf32=True,
    optimizer="adamw",
    gradient_checkpointing=False,
    micro_batch_size=1,
    gradient_accumulation_steps=1,
    parallelism="none",
    num_gpus=1,
)


def cuda_plan(**fields) -> Plan:
    """:data:`PLAN_BASE` with ``fields`` over it."""
    return Plan(**{**PLAN_BASE, **fields})


@pytest.fixture
def make_facts():
    return facts


_MODULE_MARKS = re.compile(r"^pytestmark = (.+)$", re.M)
_WORDS = re.compile(r"[\w.+-]+")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """True for a test module whose every test ``-m`` deselects, whatever marks its tests add to the module's: its
    ``pytestmark = ...`` line (read, not imported) gives marks every test has; the expression is evaluated for each
    combination of the other names it mentions. None (collect as usual) when in doubt."""
    markexpr = config.getoption("markexpr", "") or ""
    if not markexpr or re.search(r"\w\(", markexpr):
        return None  # no -m, or marks with arguments (``slow(...)``): pytest decides
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    match = _MODULE_MARKS.search(collection_path.read_text(encoding="utf-8"))
    if match is None:
        return None
    marks = set(re.findall(r"pytest\.mark\.(\w+)", match[1]))
    others = sorted(set(_WORDS.findall(markexpr)) - {"and", "or", "not"} - marks)
    try:
        from _pytest.mark.expression import Expression

        expression = Expression.compile(markexpr)
        for chosen in itertools.product((False, True), repeat=len(others)):
            names = marks | {name for name, on in zip(others, chosen) if on}
            if expression.evaluate(lambda name, /, **kwargs: name in names):
                return None
    except Exception:  # pytest's private expression API changed: collect, -m still deselects
        return None
    return True


#: The marks of the tests that take seconds each (simulations, trials, a process of their own).
_LONG_MARKS = ("slow", "subprocess")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with the most long tests (:data:`_LONG_MARKS`) first, each module's tests together and in their
    order: the two workers of ``pytest -n auto`` start on the long tests and end on short ones, instead of one worker
    running the wizard's and the trials' tests alone at the end (longest first evens out parallel work). A stable
    sort, so every worker collects the same order, as pytest-xdist requires."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    long: dict[str, int] = {}
    for item in items:
        long[module(item)] = long.get(module(item), 0) + any(item.get_closest_marker(m) for m in _LONG_MARKS)
    items.sort(key=lambda item: -long[module(item)])


@pytest.fixture(autouse=True)
def _empty_run_store(tmp_path_factory, monkeypatch):
    """Every test starts with an empty local store of runs of its own (``ADVISOR_HOME``), never the user's."""
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path_factory.mktemp("advisor_home")))
