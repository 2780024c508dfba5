"""The caching allocator's reserve: what the device shows in use (NVML "used") for a peak of live tensors.

PyTorch's caching allocator keeps freed blocks for reuse instead of returning them to CUDA, so the device holds more
than ``max_memory_allocated``: ``max_memory_reserved`` (PyTorch "CUDA semantics: memory management",
https://pytorch.org/docs/stable/notes/cuda.html#memory-management), plus the CUDA context outside the allocator
(:mod:`probes.cuda_stack`). :func:`device_bytes` prices both; ``benchmarks/refit_device.py`` reads the constants
back from a GPU's records.
"""

from __future__ import annotations

from probes.cuda_stack import LAZY_CONTEXT_BYTES
from advisor.core.units import MIB
from advisor.core.vocabulary import Device, Parallelism
from advisor.core.plan import Plan
from advisor.engine.states import model_states
from probes.model import ModelProfile

#: The caching allocator's reserve over live tensors (``max_memory_reserved`` / ``max_memory_allocated``): model
#: states are allocated once at their exact sizes (rounded to 2 MiB blocks), while activations and temporaries of
#: changing sizes fragment the cached blocks (PyTorch "CUDA semantics: memory management",
#: https://pytorch.org/docs/stable/notes/cuda.html#memory-management). Fitted to the HF guide's nine V100
#: bert-large rows (../shared/seeds/003, NVML used less the measured 1343 MiB context; two constants, nine rows:
#: median |error| 1.7 %, worst 6.6 %), where a flat 10 % over the whole peak left big-activation rows 6-9 % low and
#: state-dominated ones 5-7 % high. Checked on a second source that publishes both readings
#: (``benchmarks/allocator_reserve.py``: fms-acceleration's A100 runs, torch 2.4, packed 4096-token rows): one GPU
#: implies 1.25-1.43 (median 1.35, n=6; a lower bound: nvidia-smi polled each second), FSDP 1.31-2.63 (n=5), so
#: the constant sits at the low end and FSDP's extra fragmentation is not modelled; the reserved-memory readings of
#: torchtitan, PEFT's and Answer.AI's runs (``benchmarks/published.py``) lean the other way, so it is not refitted;
#: large transients are capped (:data:`TRANSIENT_RESERVE_CAP_BYTES`, fitted to this project's H100 records).
TRANSIENT_RESERVE = 1.25
#: The most the allocator reserves over transient tensors, bytes, without sharded parameters: fragmentation comes from
#: blocks of the step's largest temporaries that later requests cannot reuse, not from their sum. Fitted to this
#: project's first GPU records (``benchmarks/results/validate_h100-sxm.jsonl``: H100 80GB, torch 2.11, eight trials):
#: reserved less allocated was 0.4-3.5 GiB at 7-48 GiB of transients, so the flat reserve over-priced rows without
#: checkpointing by 13-18 %; the cap gives those readings median |error| 1.1 %, worst 4.1 % (without: 14.9 %, 18.4 %).
#: Checked on the second lease's seven trials (the same file): over all 15, median 1.8 %, worst 6.0 % (activation
#: offloading at micro-batch 4, 4.0 GiB reserved over allocated); caps of 1.5, 2.5 and 3 GiB give 1.8-2.1 % and
#: 4.6-7.6 %, so the cap stays.
#: Checked, not fitted (``benchmarks/published.py``): PEFT's L40S LoRA ``max_memory_reserved`` +9.7 / +8.9 % -> +3.4 /
#: +2.8 %, memory median |error| 5.7 -> 5.3 % (n=97), fit 123 -> 124 of 141, the V100 table unchanged. Against it:
#: fms-acceleration's one-GPU runs (A100, torch 2.4, nvidia-smi polled each second) imply more, and are priced at
#: 0.81-0.96 of their reading with the cap (0.87-1.00 without); the cap follows the direct readings. FSDP and ZeRO-3
#: gather and free each layer's parameters, "the high GPU reserved memory issue for FSDP" (pytorch/pytorch commit
#: 3bcb4f5c, its all-gather limiter), and fms-acceleration's FSDP1 readings imply 1.3-2.6× the transients: no cap
#: there; FSDP2 avoids what causes it and is capped (:func:`gathers_through_record_stream`).
TRANSIENT_RESERVE_CAP_BYTES = 2048 * MIB
ALLOCATOR_SLACK_BYTES = 128 * MIB  #: blocks cached but free at the peak (the same fit)


def gathers_through_record_stream(plan: Plan) -> bool:
    """Whether the plan's gathered parameters churn the cache, so that the reserve goes uncapped: FSDP1 and ZeRO-3
    all-gather on a side stream and hand the buffers to the compute stream with ``recordStream``, which keeps each
    freed block from reuse until the compute stream passes it ("the high GPU reserved memory issue for FSDP",
    pytorch/pytorch commit 3bcb4f5c, FSDP1's all-gather limiter). FSDP2's ``fully_shard`` avoids ``recordStream``
    for "lower and deterministic GPU memory" (torchtitan docs/fsdp.md, "Why FSDP2?": "7% lower peak
    memory than FSDP1" on Llama-7B, 8 H100s): its reserve is capped as a replicated run's.

    Checked, not fitted (``benchmarks/published.py``): torchtitan's FSDP2 runs read ``max_memory_reserved`` (7
    1-D runs on 8 and 128 H100s, 2 on 32 / 64 H200s); uncapped they were priced +5.6 .. +18.0 % over it, capped
    −8.8 .. +0.8 %; the two 2-D runs (FSDP 32 × TP 8, Llama 3.1 70B) went from −15 / −10 % to −28 / −23 %."""
    parallelism = Parallelism.of(plan.parallelism)
    if parallelism.fsdp:
        return not plan.runs_fsdp2
    return parallelism.stage >= 3


def device_bytes(peak_bytes: int, plan: Plan, context_bytes: int = LAZY_CONTEXT_BYTES, states_bytes: int = 0) -> int:
    """What the device shows in use for a live-tensor peak of which ``states_bytes`` are model states
    (:func:`advisor.engine.memory.persistent_bytes`), bytes: the caching allocator's reserve (the peak, plus the
    transient tensors (the rest) × (:data:`TRANSIENT_RESERVE` − 1) up to :data:`TRANSIENT_RESERVE_CAP_BYTES`, plus
    :data:`ALLOCATOR_SLACK_BYTES`) and the CUDA context; on the CPU, the peak itself."""
    if plan.device != Device.CUDA:
        return peak_bytes
    transient = peak_bytes - min(states_bytes, peak_bytes)
    reserve = int(transient * (TRANSIENT_RESERVE - 1))
    if not gathers_through_record_stream(plan):
        reserve = min(reserve, TRANSIENT_RESERVE_CAP_BYTES)
    return peak_bytes + reserve + ALLOCATOR_SLACK_BYTES + context_bytes


def device_floor_bytes(
    model: ModelProfile, plan: Plan, nodes: int = 1, cuda_context_bytes: int = LAZY_CONTEXT_BYTES
) -> int:
    """A lower bound of :func:`advisor.engine.memory.estimate_memory`'s ``device_bytes`` for ``plan`` at any
    micro-batch, accumulation, checkpointing or stack (what the model states do not read,
    :data:`advisor.core.dimensions.NOT_STATES`), bytes: the weights and optimizer
    states every peak holds, the allocator's slack and the CUDA context (on the CPU: the states alone). What the
    planner's search prunes a group of candidates by before pricing it."""
    s = model_states(model, plan, nodes)
    if plan.device != Device.CUDA:
        return s.weights + s.optimizer
    return s.weights + s.optimizer + ALLOCATOR_SLACK_BYTES + cuda_context_bytes
