"""The hardware report of ``advisor probe``: GPUs, links, the CUDA stack, the host. Printing only."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from advisor.app.report import gib, value_text
from probes.hardware import HardwareProfile
from advisor.core.units import MIB


#: GPUs beyond which a uniform link matrix is one line (16: the largest NVLink board of 8-GPU servers twice over;
#: a wider matrix does not fit a terminal).
_LINK_MATRIX_MOST = 16


def hardware_table(hw: HardwareProfile) -> Group:
    """GPUs, links, the CUDA stack (with GPUs: :func:`cuda_stack_line`) and the host of a hardware profile."""
    parts = []
    if hw.gpus:
        t = Table(title=f"GPUs ({hw.source}{f', {hw.nodes} nodes' if hw.nodes > 1 else ''})", title_justify="left")
        for col in ("#", "name", "cc", "memory", "tensor cores", "bf16", "tf32", "align (elements)", "peak bf16/fp16",
                    "bandwidth", "temp", "power", "PCIe"):
            t.add_column(col)
        for g in hw.gpus:
            peak = g.peak_tflops
            peak16 = f"{(peak.bf16 or peak.fp16):g} TFLOP/s" if peak and (peak.bf16 or peak.fp16) else "—"
            t.add_row(str(g.index), g.name, g.compute_capability, gib(g.memory_total_bytes),
                      f"gen {g.tensor_core_generation}" if g.tensor_cores else "no", value_text(g.bf16), value_text(g.tf32),
                      str(g.alignment_multiple), peak16,
                      f"{g.memory_bandwidth_gbps:g} GB/s" if g.memory_bandwidth_gbps else "—",
                      f"{g.temperature_c:.0f} °C" if g.temperature_c is not None else "—",
                      f"{g.power_limit_w:.0f}/{g.default_power_limit_w:.0f} W"
                      if g.power_limit_w and g.default_power_limit_w else "—",
                      f"gen{g.pcie_generation} x{g.pcie_width}" if g.pcie_generation and g.pcie_width else "—")
        parts.append(t)
    else:
        parts.append(Text("No NVIDIA GPU found: advisor plans for training on the CPU.", style="bold yellow"))
    kinds = {link.label for link in hw.links}
    if len(hw.gpus) > _LINK_MATRIX_MOST and len(kinds) == 1:  # a uniform board: one line, not an N × N matrix
        parts.append(Text(f"GPU links: every pair of the {len(hw.gpus)} GPUs is {kinds.pop()} (nvidia-smi topo -m)"))
    elif hw.links:
        t = Table(title="GPU links (nvidia-smi topo -m)", title_justify="left")
        t.add_column("")
        for g in hw.gpus:
            t.add_column(f"GPU{g.index}")
        labels = {(link.a, link.b): link.label for link in hw.links}
        for g in hw.gpus:
            t.add_row(f"GPU{g.index}", *["X" if g.index == o.index else
                                         labels.get((min(g.index, o.index), max(g.index, o.index)), "?")
                                         for o in hw.gpus])
        parts.append(t)
    if hw.gpus:
        parts.append(cuda_stack_line(hw))
    if hw.host:
        h = hw.host
        parts.append(Text(f"Host: {h.cpu_cores} CPU cores, {gib(h.ram_bytes)} RAM"
                          + (f", {h.cpu_model}" if h.cpu_model else "")
                          + (f" ({', '.join(h.cpu_flags)})" if h.cpu_flags else "")))
        if h.packages:
            have = [f"{name} {version}" for name, version in h.packages.items() if version]
            missing = [name for name, version in h.packages.items() if not version]
            parts.append(Text("Packages: " + (", ".join(have) or "none of the optional ones")
                              + (f"; not installed: {', '.join(missing)}" if missing else "")))
    for note in hw.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def cuda_stack_line(hw: HardwareProfile) -> Text:
    """One line on the CUDA stack: the torch build, and the CUDA context's device memory per GPU with its reason
    (given or measured, else by module loading: :attr:`probes.hardware.HardwareProfile.context_bytes`)."""
    host = hw.host if hw.source != "catalog" else None
    torch = ""
    if host is not None:
        torch = (f"torch {host.torch_version}" + (f" built with CUDA {host.torch_cuda_version}"
                                                  if host.torch_cuda_version else " (no CUDA build)")
                 if host.torch_version else "torch not installed") + "; "
    loading = hw.module_loading
    why = "as given or measured" if hw.cuda_context_bytes else loading.why
    return Text(f"CUDA: {torch}context {hw.context_bytes / MIB:,.0f} MiB per GPU ({why})")




def list_gpus(as_json: bool, console) -> int:
    """``advisor probe --gpu list``: the GPU catalog as a table on ``console``, or JSON on stdout; returns exit 0."""
    import json
    import sys

    from advisor.core.errors import ExitCode
    from probes.gpu_catalog import catalog

    entries = list(catalog().values())
    if as_json:
        sys.stdout.write(json.dumps([e.model_dump() for e in entries], indent=2) + "\n")
        return ExitCode.OK
    t = Table(title="GPU catalog (--gpu NAME[:COUNT])", title_justify="left")
    for col in ("name", "GPU", "cc", "memory", "fp32", "tf32", "bf16/fp16", "bandwidth", "NVLink"):
        t.add_column(col)
    for e in entries:
        p = e.peak_tflops
        t.add_row(e.id, e.name, e.compute_capability, f"{e.memory_gib:g} GiB", f"{p.fp32:g}",
                  f"{p.tf32:g}" if p.tf32 else "—", f"{(p.bf16 or p.fp16):g}", f"{e.memory_bandwidth_gbps:g} GB/s",
                  f"{e.nvlink_bandwidth_gbps:g} GB/s" if e.nvlink_bandwidth_gbps else "—")
    console.print(t)
    return ExitCode.OK
