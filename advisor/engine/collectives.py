"""The fixed cost of each collective call: NCCL's own latency model, and how many calls a step makes.

:mod:`advisor.engine.communication` prices a collective's bytes at the link's bandwidth; this module adds what every
call costs whatever its size. NCCL picks its algorithm and protocol with a cost model of the form
``time = latency + bytes / bandwidth`` (``ncclTopoGetAlgoTime`` in NVIDIA/nccl ``src/graph/tuning.cc``, commit
01afd20, https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc), whose latency for a ring of n ranks over
m nodes is a base latency plus one hop's latency per step of the ring: n − 1 steps for an all-gather or a
reduce-scatter, 2·(n − 1) for an all-reduce, of which m − 1 (2·(m − 1)) cross the network. The constants are that
file's, for the Simple protocol (large buffers: the ones training sends), not fitted here. Small messages reach a
smaller share of the link than large ones by the same law: a call of B bytes runs at B / (latency·bw + B) of the
bandwidth, so collectives' efficiency by message size follows from the call counts below without a table of its own.

Call counts follow the code that runs: DDP all-reduces its gradient buckets (``bucket_cap_mb`` 25 MiB, PyTorch
``DistributedDataParallel`` docs); FSDP gathers and reduce-scatters one wrapped unit at a time, advisor wraps each
transformer block (accelerate's ``TRANSFORMER_BASED_WRAP``); DeepSpeed ZeRO reduces in buckets of
``reduce_bucket_size`` and ZeRO-3 fetches parameters per module in its pre-forward and pre-backward hooks: one
``all_gather_coalesced`` call per submodule that holds partitioned parameters, which are the linear layers (smaller
ones persist below ``stage3_param_persistence_threshold``, 1e5 elements;
``deepspeed/runtime/zero/partitioned_param_coordinator.py``, ``fetch_sub_module``): :func:`zero3_fetches`.
"""

from __future__ import annotations

import math

from probes.model import ModelProfile

#: NCCL's base latency of a ring collective, Simple protocol, microseconds (``baseLat[Ring][Simple]``).
NCCL_BASE_LATENCY_US = 8.4
#: NCCL's latency per ring step, Simple protocol, microseconds (``hwLat[...][Ring][Simple]``): over NVLink, over
#: PCIe, over the network between nodes.
NCCL_HOP_LATENCY_US = {"nvlink": 3.4, "pci": 5.7, "net": 9.6}
#: NCCL's multi-node ring all-reduce plateau: its latency times 1.9 beyond small buffers (``ncclTopoGetAlgoTime``).
NCCL_RING_PLATEAU = 1.9
#: DDP's gradient bucket, bytes (``bucket_cap_mb=25``, PyTorch DistributedDataParallel docs,
#: https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html).
DDP_BUCKET_BYTES = 25 * 2**20
#: DeepSpeed ZeRO's ``reduce_bucket_size`` and ``allgather_bucket_size`` defaults, elements (5e8; DeepSpeed config
#: docs, https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training).
ZERO_BUCKET_ELEMENTS = 5e8


def ring_latency_seconds(kind: str, ranks: int, nodes: int, nvlink: bool) -> float:
    """Latency of one ring collective, seconds, by NCCL's model (Simple protocol): 0 on one rank.

    Args:
        kind: ``"all_reduce"``, or ``"all_gather"`` / ``"reduce_scatter"`` (the same latency).
        ranks: the ranks of the ring; nodes: the nodes they span (≥ 1); nvlink: the ranks of a node joined by NVLink
            (else PCIe).
    Raises:
        ValueError: an unknown ``kind``.
    """
    if ranks <= 1:
        return 0.0
    if kind not in ("all_reduce", "all_gather", "reduce_scatter"):
        raise ValueError(f"unknown collective {kind!r}")
    nodes = max(min(nodes, ranks), 1)
    factor = 2 if kind == "all_reduce" else 1
    steps, inter = factor * (ranks - 1), factor * (nodes - 1)
    intra = NCCL_HOP_LATENCY_US["nvlink" if nvlink else "pci"]
    us = NCCL_BASE_LATENCY_US + (steps - inter) * intra + inter * NCCL_HOP_LATENCY_US["net"]
    if kind == "all_reduce" and nodes > 1:
        us *= NCCL_RING_PLATEAU
    return us * 1e-6


def blocks(model: ModelProfile) -> int:
    """Transformer blocks of the model (encoder and decoder layers): FSDP's wrapped units, ZeRO-3's fetches."""
    return max(model.encoder_layers + model.decoder_layers, 1)


def bucket_calls(nbytes: float, bucket_bytes: float) -> int:
    """Calls a buffer of ``nbytes`` takes in buckets of ``bucket_bytes`` (at least one when there is anything)."""
    return math.ceil(nbytes / bucket_bytes) if nbytes > 0 else 0


#: DeepSpeed ZeRO-3's ``stage3_max_reuse_distance`` default, parameter elements (1e9, DeepSpeed config docs,
#: https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training): a fetched parameter that will be
#: used again within this many fetched elements is kept, not released.
ZERO3_REUSE_ELEMENTS = 1e9


def linears_per_block(model: ModelProfile) -> int:
    """Linear layers of one transformer block: q, k, v, o and the MLP's (3 gated, 2 not); ZeRO-3's fetched
    submodules of a block (:func:`zero3_fetches`)."""
    return 4 + (3 if model.gated_mlp else 2)


def zero3_gathers(block_elements: float, checkpointing: bool) -> int:
    """Parameter all-gathers of each block per micro-batch under DeepSpeed ZeRO-3: the forward's and the backward's,
    and under activation checkpointing the recomputed forward's too when the block holds more parameter elements
    (``block_elements``, this rank's) than :data:`ZERO3_REUSE_ELEMENTS`: its parameters are then released between
    the recomputation and the backward and fetched again; a smaller block's are kept for its backward."""
    return 3 if checkpointing and block_elements > ZERO3_REUSE_ELEMENTS else 2


def zero3_fetches(model: ModelProfile) -> int:
    """``all_gather_coalesced`` calls of one parameter all-gather pass of the model under ZeRO-3: one per fetched
    submodule (:func:`linears_per_block` of each block)."""
    return blocks(model) * linears_per_block(model)
