"""bitsandbytes' paged optimizer states: CUDA unified memory outside PyTorch's caching allocator.

A paged optimizer (bitsandbytes ``PagedAdamW8bit`` / ``PagedAdamW32bit``, the Trainer's ``optim="paged_adamw_8bit"`` /
``"paged_adamw_32bit"``: advisor's ``paged-adamw-8bit`` / ``paged-adamw``) allocates each state buffer of a parameter of
at least :data:`PAGED_MIN_ELEMENTS` elements with ``F.get_paged``, i.e. ``lib.cget_managed_ptr`` →
``cudaMallocManaged`` (bitsandbytes ``bitsandbytes/optim/optimizer.py``, ``Optimizer8bit.get_state_buffer``;
``bitsandbytes/functional.py``, ``get_paged``); smaller ones are ordinary ``torch.zeros_like`` tensors. Before each
parameter's update it prefetches the pages to the GPU (``Optimizer8bit.prefetch_state`` → ``cudaMemPrefetchAsync``).
Managed memory is not PyTorch's: ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` do not count it
(PyTorch "CUDA semantics: memory management", https://pytorch.org/docs/stable/notes/cuda.html#memory-management,
counts the caching allocator's blocks only), and when the device runs short the driver evicts its pages to CPU RAM
instead of failing ("Paged Optimizers", QLoRA sec. 3, https://arxiv.org/abs/2305.14314; CUDA C++ Programming Guide,
"Unified Memory Programming", oversubscription on Pascal and newer,
https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#um-unified-memory-programming-hd).

So a paged plan's states are left out of the peak of live tensors; the device holds them while it has room (the
plan then fits as if they were ordinary), and a plan whose other memory fits but not with them runs with the rest in
CPU RAM: :func:`paged_verdict` calls it tight (it runs, slower: validate it first), and each step moves the evicted
pages to the GPU for the update and back when the next forward needs the room (:func:`paging_seconds`).

Under FSDP2 the emitted files swap a bitsandbytes optimizer for a DTensor-capable one with the same states
(``OptimizerSpec.trainer_optim_dtensor``: torchao's AdamW8bit or torch's AdamW), which is not paged.
"""

from __future__ import annotations

from math import prod

from probes.adapters import adapter_parameters, adapter_parameters_in_matrices_of
from probes.model import ModelProfile
from advisor.core.plan import Plan
from advisor.core.units import gbyte_to_bytes_per_s
from advisor.core.vocabulary import Device, Method, Optimizer
from advisor.engine.bands import Verdict, verdict_of
from advisor.engine.communication import PCIE_GBPS

#: The smallest parameter, in elements, whose states bitsandbytes pages (``Optimizer8bit.get_state_buffer``:
#: ``if not self.is_paged or p.numel() < 1e5: return torch.zeros_like(...)``): taken from the code, not fitted.
PAGED_MIN_ELEMENTS = 100_000


def pages_states(plan: Plan) -> bool:
    """Whether the plan's optimizer states live in unified memory: a paged bitsandbytes optimizer on a GPU, not
    swapped for its DTensor stand-in under FSDP2 (module docstring)."""
    spec = Optimizer.of(plan.optimizer).spec
    return spec.paged and plan.device == Device.CUDA and not (plan.runs_fsdp2 and spec.trainer_optim_dtensor)


def paged_share(model: ModelProfile, plan: Plan) -> float:
    """The share of the trained parameters (0 to 1) whose states bitsandbytes pages: those in tensors of at least
    :data:`PAGED_MIN_ELEMENTS` elements after the tensor-parallel split (the matrices and embeddings of full
    fine-tuning, not its norms and biases; LoRA's ``lora_A`` / ``lora_B`` only at r·d of 100,000 or more, e.g. rank
    32 at h = 4096 but not rank 16). DeepSpeed's ZeRO hands the optimizer flat partitions, all above the size: this
    prices them by shape as well, within the norms' and biases' share (under 1 % of a language model's parameters)."""
    t = max(plan.tensor_parallel, 1)
    if Method.of(plan.method).spec.adapters:
        total = adapter_parameters(model, plan.lora_rank, plan.lora_targets)
        paged = adapter_parameters_in_matrices_of(model, plan.lora_rank, plan.lora_targets, PAGED_MIN_ELEMENTS * t)
        return paged / total if total else 0.0
    sizes = [(prod(shape), count) for shape, count in model.parameter_shapes]
    total = sum(n * count for n, count in sizes)
    return sum(n * count for n, count in sizes if n >= PAGED_MIN_ELEMENTS * t) / total if total else 0.0


def paged_state_bytes(model: ModelProfile, plan: Plan, optimizer_bytes: int) -> int:
    """Bytes of this device's optimizer states (``optimizer_bytes``, all of them) in CUDA unified memory: their
    :func:`paged_share` when :func:`pages_states`, else 0."""
    return int(optimizer_bytes * paged_share(model, plan)) if pages_states(plan) and optimizer_bytes else 0


def evicted_bytes(device_bytes: int, paged_bytes: int, capacity_bytes: int) -> int:
    """Paged state bytes the device cannot hold beside the rest of the step (``device_bytes`` counts the paged
    states as resident): at least this much sits in CPU RAM at the step's peak, bytes (0 to ``paged_bytes``)."""
    return min(max(device_bytes - capacity_bytes, 0), paged_bytes)


def paged_verdict(
    device_bytes: int, paged_bytes: int, usable_bytes: int, capacity_bytes: int, on_host: bool = True
) -> Verdict:
    """:func:`~advisor.engine.bands.verdict_of` of ``device_bytes`` (paged states counted as resident), except that a
    plan which does not fit only because of its ``paged_bytes`` is tight: the driver evicts their pages to CPU RAM
    and the step runs, slower (:func:`paging_seconds`)."""
    verdict = verdict_of(device_bytes, usable_bytes, capacity_bytes, on_host)
    if (
        verdict is Verdict.NO_FIT
        and paged_bytes
        and verdict_of(device_bytes - paged_bytes, usable_bytes, capacity_bytes, on_host) is not Verdict.NO_FIT
    ):
        return Verdict.TIGHT
    return verdict


def paging_seconds(evicted: int, pcie_generation: int | None) -> float:
    """The least time a step spends moving ``evicted`` bytes of paged states, seconds: to the GPU for the optimizer's
    update (``prefetch_state``) and back to CPU RAM when the next forward's allocations need the room, once each way
    over the GPU's PCIe link (:data:`advisor.engine.communication.PCIE_GBPS`, the host copies' rate; generation 4 when unknown). A lower bound: evictions the driver
    makes on demand, page by page, run below a bulk copy's rate."""
    if evicted <= 0:
        return 0.0
    return 2 * evicted / gbyte_to_bytes_per_s(PCIE_GBPS.get(pcie_generation or 4, PCIE_GBPS[4]))
