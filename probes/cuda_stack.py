"""The CUDA software stack's own share of device memory: the CUDA context, and what sets its size.

A training process holds device memory outside torch's caching allocator: the CUDA context, the kernels of torch,
cuBLAS and cuDNN loaded into it, and library handles. Its size depends above all on whether CUDA loads modules
eagerly (every kernel of every library at start-up) or lazily (each kernel on first use):

- lazy loading needs a CUDA runtime of 11.7 or newer and a driver of R515 or newer, is off by default before CUDA
  12.2 (on Linux) and is set by the ``CUDA_MODULE_LOADING`` environment variable (CUDA C++ Programming Guide,
  "Lazy Loading": change history, "Requirements for Lazy Loading",
  https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/lazy-loading.html);
- torch sets ``CUDA_MODULE_LOADING=LAZY`` when it is unset from release 1.13 on (pytorch/pytorch PR 86509,
  https://github.com/pytorch/pytorch/pull/86509), so torch >= 1.13 built with CUDA >= 11.7 loads lazily.

Figures: :data:`EAGER_CONTEXT_BYTES` and :data:`LAZY_CONTEXT_BYTES`. The probe reads the installed torch's version
and CUDA build from its files (it imports nothing) and ``CUDA_MODULE_LOADING``; :func:`measure_context_bytes`
measures the context on a real GPU (``advisor probe --measure-context``); planning for catalog GPUs takes the CUDA
version the user gives (``--cuda-version``), else assumes a current stack (lazy loading).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from pathlib import Path
from typing import NamedTuple

from advisor.core.units import MIB
from probes.nvml_memory import bus_id, process_used_bytes

#: Device memory outside the allocator with eager module loading: the HF guide's reading after a first tiny tensor
#: (transformers v4.18 "Performance and Scalability", "Anatomy of Model's Memory": "GPU memory occupied: 1343 MB",
#: "the kernels alone take up 1.3GB"; torch 1.x on CUDA 11, ../shared/seeds/003). ``benchmarks/v100_published.py``
#: reproduces that table's nine rows within 6.6 % with it.
EAGER_CONTEXT_BYTES = 1343 * MIB
#: The same with lazy loading. The bare context measures 287,047,680 bytes (torch 1.13, PR 86509 above, against
#: 666,632,192 eager on the same machine), "around 400MB" (a PyTorch maintainer, pytorch/pytorch issue 109888,
#: 2023) and 426 MiB (torch 2.10 with CUDA 13.0 on an RTX 6000 Ada, unslothai/unsloth-zoo PR 1053); a training
#: step then loads the kernels it runs (GEMMs, attention, optimizer) on first use, so advisor takes 500 MiB. This
#: project's first GPU records (``benchmarks/results/validate_h100-sxm.jsonl``: NVML used less ``max_memory_reserved``
#: after training steps) measured 744-760 MiB on an H100 with torch 2.11 and CUDA 13.0 (eight trials, one machine
#: and stack), and 828-832 MiB at the second lease, whose process had also loaded TRL's and Liger's kernels (seven
#: trials): a larger GPU, a newer CUDA and more kernel libraries hold more, so such a stack should pass
#: ``--cuda-context 832MiB`` or measure its own (``advisor probe --measure-context``); the default stays until
#: another stack is measured.
LAZY_CONTEXT_BYTES = 500 * MIB

LAZY_FROM_CUDA = (11, 7)  #: the first CUDA runtime with lazy loading (Programming Guide, change history)
LAZY_BY_DEFAULT_CUDA = (12, 2)  #: lazy loading on by default on Linux from this runtime (the same table)
LAZY_FROM_DRIVER = 515  #: lazy loading needs an R515+ user-mode driver ("CUDA Driver Version Requirement")
TORCH_SETS_LAZY = (1, 13)  #: torch sets CUDA_MODULE_LOADING=LAZY when unset from this release (PR 86509)
MODULE_LOADING_ENV = "CUDA_MODULE_LOADING"
#: A CUDA version as ``torch.version.cuda`` spells it ('12.1', '11.8'): what ``--cuda-version`` accepts.
CUDA_VERSION_PATTERN = r"^\d{1,2}\.\d{1,2}(\.\d{1,3})?$"


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """The leading release numbers of ``version`` ('12.1' -> (12, 1), '2.5.1+cu121' -> (2, 5, 1)); None when it
    is None or does not start with a number."""
    found = re.match(r"\d+(?:\.\d+)*", version or "")
    return tuple(int(p) for p in found.group().split(".")) if found else None


class ModuleLoading(NamedTuple):
    """How CUDA loads a training process's kernels: ``lazy`` or not, ``why`` (a clause for a sentence) and ``fix``
    (what makes it lazy; None when it is)."""

    lazy: bool
    why: str
    fix: str | None = None


def lazy_loading(
    cuda_version: str | None,
    torch_version: str | None = None,
    env: str | None = None,
    driver_version: str | None = None,
) -> ModuleLoading:
    """Whether CUDA loads modules lazily for a training process, why, and what would make it so.

    Args:
        cuda_version: the CUDA runtime torch was built with ('12.1', ``torch.version.cuda``); None: unknown.
        torch_version: torch's release ('2.5.1+cu121'); None: unknown (a current release is assumed).
        env: ``CUDA_MODULE_LOADING`` as set ('LAZY', 'EAGER', 'DEFAULT'); None: unset or unknown.
        driver_version: the NVIDIA driver ('550.54.15'); None: unknown.
    Unknown facts count as a current stack: lazy. Sources: the module docstring.
    """
    cuda, torch, driver = version_tuple(cuda_version), version_tuple(torch_version), version_tuple(driver_version)
    lazy_env = f"{MODULE_LOADING_ENV}=LAZY"
    if cuda is not None and cuda < LAZY_FROM_CUDA:
        return ModuleLoading(
            False,
            f"CUDA {cuda_version} predates lazy module loading (CUDA 11.7)",
            "a torch built with CUDA 11.7 or newer (pip install -U torch) loads kernels lazily",
        )
    if driver is not None and driver[0] < LAZY_FROM_DRIVER:
        return ModuleLoading(
            False,
            f"driver {driver_version} predates lazy module loading (R{LAZY_FROM_DRIVER})",
            f"a driver of R{LAZY_FROM_DRIVER} or newer loads kernels lazily",
        )
    said = (env or "").strip().upper()
    if said == "LAZY":
        return ModuleLoading(True, lazy_env)
    if said == "EAGER":
        return ModuleLoading(False, f"{MODULE_LOADING_ENV}={env} is set", f"unset it or export {lazy_env}")
    if said == "DEFAULT" and cuda is not None and cuda < LAZY_BY_DEFAULT_CUDA:
        return ModuleLoading(
            False,
            f"{MODULE_LOADING_ENV}=DEFAULT is set and CUDA {cuda_version} loads eagerly by default",
            f"export {lazy_env}",
        )
    if (
        said != "DEFAULT"
        and torch is not None
        and torch < TORCH_SETS_LAZY
        and (cuda is None or cuda < LAZY_BY_DEFAULT_CUDA)
    ):
        return ModuleLoading(
            False,
            f"torch {torch_version} does not set {lazy_env} (1.13 does) and CUDA "
            f"{cuda_version or 'before 12.2'} loads eagerly by default",
            f"export {lazy_env}, or pip install -U torch",
        )
    return ModuleLoading(
        True, "lazy module loading" + (f" (CUDA {cuda_version})" if cuda_version else " (assumed: CUDA >= 11.7)")
    )


def default_context_bytes(lazy: bool) -> int:
    """Device memory the CUDA context and loaded kernels take, bytes: :data:`LAZY_CONTEXT_BYTES` or
    :data:`EAGER_CONTEXT_BYTES`."""
    return LAZY_CONTEXT_BYTES if lazy else EAGER_CONTEXT_BYTES


def torch_build() -> tuple[str | None, str | None]:
    """The installed torch's release and the CUDA version it was built with (``torch.version.cuda``; None for a
    CPU or ROCm build), both None without torch. Reads the distribution's metadata and ``torch/version.py`` as
    text: imports nothing, so it stays off the command line's fast path."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, None
    try:
        release = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        release = None
    cuda = None
    for folder in spec.submodule_search_locations:
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        found = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([\d.]+)['\"]", text, flags=re.MULTILINE)
        cuda = found.group(1) if found else None
        if release is None:
            found = re.search(r"^__version__\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, flags=re.MULTILINE)
            release = found.group(1) if found else None
        break
    return release, cuda


def module_loading_env() -> str | None:
    """``CUDA_MODULE_LOADING`` as this process's environment sets it, None when unset."""
    return os.environ.get(MODULE_LOADING_ENV) or None


def measure_context_bytes(index: int = 0) -> int | None:
    """Device memory this process holds outside torch's caching allocator once CUDA is initialised on GPU
    ``index`` and a half-precision matrix product has loaded cuBLAS: NVML's figure for this process less
    ``torch.cuda.memory_reserved``, bytes. None without torch, CUDA or a per-process NVML reading.

    Imports torch and creates a CUDA context on the GPU (seconds): ``advisor probe --measure-context`` only, never
    the planning path. The context stays until the process exits."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None

    with torch.cuda.device(index):
        a = torch.ones((256, 256), device="cuda", dtype=torch.float16)
        float((a @ a).sum())  # a GEMM loads cuBLAS and its workspace, as a training step's first one does
        torch.cuda.synchronize()
        used = process_used_bytes(bus_id(torch.cuda.get_device_properties(index)))
        if used is None:
            return None
        return max(used - int(torch.cuda.memory_reserved(index)), 0)
