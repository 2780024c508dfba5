"""The CUDA context's device memory: lazy or eager module loading by CUDA version, torch release, CUDA_MODULE_LOADING
and driver; the local torch build read without importing it; NVML's per-process figure; the rule and the CLI."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import json

import pytest

from advisor.app.api import estimate, recommend
from advisor.app.hardware_report import cuda_stack_line
from conftest import hardware
from probes import cuda_stack
from probes.cuda_stack import EAGER_CONTEXT_BYTES, LAZY_CONTEXT_BYTES, lazy_loading, torch_build
from advisor.core.errors import ExitCode, UsageError
from probes.nvml_probe import process_used_bytes
from cli_runner import advisor

MIB = 2**20


@pytest.mark.parametrize(
    ("cuda", "torch", "env", "driver", "lazy"),
    [
        (None, None, None, None, True),  # nothing known: a current stack
        ("12.4", "2.5.1+cu124", None, "550.54.15", True),
        ("11.2", None, None, None, False),  # the HF guide's V100 notebook (CUDA 11.2, driver 460)
        ("11.6", "1.12.1", "LAZY", None, False),  # no lazy loading before CUDA 11.7, whatever the variable says
        ("11.8", "2.0.1", None, "470.82.01", False),  # lazy loading needs an R515+ driver
        ("11.8", "2.0.1", None, None, True),  # torch >= 1.13 sets CUDA_MODULE_LOADING=LAZY
        ("11.7", "1.12.1", None, None, False),  # torch 1.12 does not, and CUDA 11.7 loads eagerly by default
        ("11.7", "1.12.1", "lazy", None, True),
        ("12.4", "2.5.1", "EAGER", None, False),
        ("11.8", "2.0.1", "DEFAULT", None, False),  # DEFAULT before CUDA 12.2 is eager, even under torch >= 1.13
        ("12.2", "2.1.0", "DEFAULT", None, True),
    ],
)
def test_lazy_loading_follows_the_cuda_guide_and_torch(cuda, torch, env, driver, lazy) -> None:
    loading = lazy_loading(cuda, torch, env, driver)
    assert loading.lazy is lazy, loading
    assert (loading.fix is None) is lazy  # an eager stack always says how to make it lazy
    assert cuda_stack.default_context_bytes(loading.lazy) == (LAZY_CONTEXT_BYTES if lazy else EAGER_CONTEXT_BYTES)


def test_torch_build_reads_the_release_and_cuda_from_files(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "torch"
    folder.mkdir()
    (folder / "version.py").write_text("__version__ = '1.12.1+cu113'\ndebug = False\ncuda: Optional[str] = '11.3'\n")
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    monkeypatch.setattr(cuda_stack.importlib.util, "find_spec", lambda name: spec)

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(cuda_stack.importlib.metadata, "version", missing)
    assert torch_build() == ("1.12.1+cu113", "11.3")
    (folder / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    assert torch_build() == ("2.13.0+cpu", None)
    monkeypatch.setattr(cuda_stack.importlib.util, "find_spec", lambda name: None)
    assert torch_build() == (None, None)


def test_the_installed_torch_is_read_without_importing_it() -> None:
    pytest.importorskip("torch")
    import torch

    release, cuda = torch_build()
    assert release.split("+")[0] == torch.__version__.split("+")[0] and cuda == torch.version.cuda


class _Process:
    def __init__(self, pid: int, used: int | None) -> None:
        self.pid, self.usedGpuMemory = pid, used


class _NVML:
    """A stand-in for the pynvml module: one GPU, its processes, and its whole used memory."""

    def __init__(self, processes, used=7 * 2**30, fail=False) -> None:
        self.processes, self.used, self.fail, self.shut = processes, used, fail, False

    def nvmlInit(self) -> None:
        if self.fail:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        return bus

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self.processes

    def nvmlDeviceGetMemoryInfo(self, handle):
        return type("Memory", (), {"used": self.used})()


def test_nvml_gives_this_process_s_memory_else_the_whole_gpu_s_else_nothing() -> None:
    import os

    mine = _NVML([_Process(1, 5 * 2**30), _Process(os.getpid(), 3 * 2**30)])
    assert process_used_bytes("00000000:3b:00.0", mine) == 3 * 2**30 and mine.shut
    hidden = _NVML([_Process(os.getpid(), None)])  # containers hide per-process figures
    assert process_used_bytes("00000000:3b:00.0", hidden) == 7 * 2**30
    assert process_used_bytes("00000000:3b:00.0", _NVML([], fail=True)) is None


def test_measuring_needs_a_cuda_gpu() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        assert cuda_stack.measure_context_bytes(0) > 100 * MIB
    else:
        assert cuda_stack.measure_context_bytes(0) is None


def test_catalog_gpus_price_the_context_by_the_cuda_version_given() -> None:
    current, old = estimate("gpt2", gpu="v100-16gb"), estimate("gpt2", gpu="v100-16gb", cuda_version="11.2")
    assert current.memory.components.cuda_context_bytes == LAZY_CONTEXT_BYTES
    assert old.memory.device_bytes - current.memory.device_bytes == EAGER_CONTEXT_BYTES - LAZY_CONTEXT_BYTES
    given = estimate("gpt2", gpu="v100-16gb", cuda_version="11.2", cuda_context_bytes=900 * MIB)
    assert given.memory.components.cuda_context_bytes == 900 * MIB  # a given or measured context wins
    with pytest.raises(UsageError, match="--cuda-version '12': must look like X.Y"):
        estimate("gpt2", gpu="v100-16gb", cuda_version="12")


def test_a_probed_host_prices_its_own_torch_build_and_variable() -> None:
    def probed(**host):
        hw = hardware({"gpu": "a100-80gb", "gpu_overrides": {"driver_version": "550.54.15"}, "host": {}})
        return hw.model_copy(update={"host": hw.host.model_copy(update=host)})

    assert probed(torch_version="2.5.1", torch_cuda_version="12.4").context_bytes == LAZY_CONTEXT_BYTES
    old = probed(torch_version="1.12.1+cu113", torch_cuda_version="11.3")
    assert old.context_bytes == EAGER_CONTEXT_BYTES and "CUDA 11.3" in cuda_stack_line(old).plain
    eager = probed(torch_version="2.5.1", torch_cuda_version="12.4", cuda_module_loading="EAGER")
    assert (
        eager.context_bytes == EAGER_CONTEXT_BYTES
        and "torch 2.5.1 built with CUDA 12.4" in cuda_stack_line(eager).plain
    )


def test_an_eager_stack_is_warned_with_its_fix_and_a_lazy_one_is_not() -> None:
    def warnings(**kw) -> list[str]:
        return [
            w.message for w in recommend("gpt2", gpu="t4", **kw).warnings if w.rule_id == "stack.cuda-module-loading"
        ]

    (message,) = warnings(cuda_version="11.3")
    assert "1.3 GiB of each GPU" in message and "CUDA 11.7 or newer" in message
    assert warnings() == [] and warnings(cuda_version="12.1") == []
    assert warnings(cuda_version="11.3", cuda_context_bytes=600 * MIB) == []  # the user measured it


def test_the_command_line_takes_the_cuda_version_and_refuses_to_measure_without_a_gpu() -> None:
    out = advisor(
        "estimate",
        "--model",
        "bert-large-uncased",
        "--task",
        "sequence-classification",
        "--gpu",
        "v100-16gb",
        "--seq-len",
        "512",
        "--micro-batch-size",
        "4",
        "--precision",
        "fp16",
        "--attention",
        "eager",
        "--cuda-version",
        "11.2",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["memory"]["components"]["cuda_context_bytes"] == 1343 * MIB
    bad = advisor("probe", "--gpu", "t4", "--cuda-version", "eleven")
    assert bad.returncode == ExitCode.USAGE and bad.stderr.strip().count("\n") == 0 and "X.Y" in bad.stderr
    catalog = advisor("probe", "--gpu", "t4", "--measure-context")
    assert catalog.returncode == ExitCode.USAGE and "drop --gpu" in catalog.stderr
    probe = advisor("probe", "--gpu", "t4", "--cuda-version", "11.6")
    assert probe.returncode == 0 and "context 1,343 MiB per GPU (CUDA 11.6 predates lazy" in probe.stdout


def test_a_measured_context_is_planned_with_and_noted(monkeypatch) -> None:
    from advisor.app.cli import _measured_context

    probed = hardware({"gpu": "t4", "gpu_overrides": {}})
    monkeypatch.setattr(cuda_stack, "measure_context_bytes", lambda index=0: 612 * MIB)
    measured = _measured_context(probed, given=False)
    assert measured.context_bytes == 612 * MIB and "--cuda-context 612MiB" in measured.notes[-1]
    assert "as given or measured" in cuda_stack_line(measured).plain
    monkeypatch.setattr(cuda_stack, "measure_context_bytes", lambda index=0: None)
    with pytest.raises(UsageError, match="say --cuda-context SIZE instead"):
        _measured_context(probed, given=False)
