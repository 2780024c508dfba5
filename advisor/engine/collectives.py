"""The fixed cost of each collective call: NCCL's own latency model, and how many calls a step makes.

:mod:`advisor.engine.communication` prices a collective's bytes at the link's bandwidth; this module adds what every
call costs whatever its size. NCCL picks its algorithm and protocol with a cost model of the form
``time = latency + bytes / bandwidth`` (``ncclTopoGetAlgoTime`` in NVIDIA/nccl ``src/graph/tuning.cc``, commit
5067397c (2026-06), its constants unchanged since 2.18.1, https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc),
whose latency for a ring of n ranks over m nodes is a base latency plus one hop's latency per step of the ring:
n − 1 steps for an all-gather or a reduce-scatter, 2·(n − 1) for an all-reduce, of which m − 1 (2·(m − 1)) cross
the network. An all-reduce may run as a tree instead, whose latency grows with log2(m) (:func:`all_reduce_seconds`:
the faster of the two, as NCCL chooses). The constants are that file's, for the Simple protocol (large buffers: the
ones training sends), not fitted here. Small messages reach a smaller share of the link than large ones by the same
law: a call of B bytes runs at B / (latency·bw + B) of the bandwidth, so collectives' efficiency by message size
follows from the call counts below without a table of its own.

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

#: NCCL's base latency of a collective, Simple protocol, microseconds (``baseLatencies``): ring, tree.
NCCL_BASE_LATENCY_US = 8.4
NCCL_TREE_BASE_LATENCY_US = 6.8
#: NCCL's latency per ring step, Simple protocol, microseconds (``hwLatencies[...][Ring][Simple]``): over NVLink, over
#: PCIe, over the network between nodes (14.0 since NCCL 2.18.1; 9.6 before).
NCCL_HOP_LATENCY_US = {"nvlink": 3.4, "pci": 5.7, "net": 14.0}
#: NCCL's latency per level of a tree, Simple protocol, microseconds (``hwLatencies[...][Tree][Simple]``).
NCCL_TREE_HOP_LATENCY_US = {"nvlink": 4.0, "pci": 4.0, "net": 14.0}
#: NCCL's multi-node ring all-reduce plateau: its latency times 1.4 beyond small buffers on compute capability 8.0 and
#: newer, 1.9 before (``ncclTopoGetAlgoTime``).
NCCL_RING_PLATEAU = {True: 1.4, False: 1.9}
#: A tree all-reduce's bus bandwidth over the link's (``busBw * .92``; its algorithm bandwidth is half that: ``ratio``
#: .5), and its correction by message size for the Simple protocol (``treeCorrectionFactor[Simple]``, indexed by
#: log2(bytes / 64), 64 B to 256 MB; 1 beyond).
NCCL_TREE_BUS_SHARE = 0.92
# fmt: off
NCCL_TREE_CORRECTION = (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7,
                        0.8, 0.9, 0.9)
# fmt: on
#: DDP's gradient bucket, bytes (``bucket_cap_mb=25``, PyTorch DistributedDataParallel docs,
#: https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html).
DDP_BUCKET_BYTES = 25 * 2**20
#: DeepSpeed ZeRO's ``reduce_bucket_size`` and ``allgather_bucket_size`` defaults, elements (5e8; DeepSpeed config
#: docs, https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training).
ZERO_BUCKET_ELEMENTS = 5e8


def ring_latency_seconds(kind: str, ranks: int, nodes: int, nvlink: bool, cc: tuple[int, int] = (8, 0)) -> float:
    """Latency of one ring collective, seconds, by NCCL's model (Simple protocol): 0 on one rank.

    Args:
        kind: ``"all_reduce"``, or ``"all_gather"`` / ``"reduce_scatter"`` (the same latency).
        ranks: the ranks of the ring; nodes: the nodes they span (≥ 1); nvlink: the ranks of a node joined by NVLink
            (else PCIe); cc: the GPUs' compute capability (the all-reduce plateau: :data:`NCCL_RING_PLATEAU`).
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
        us *= NCCL_RING_PLATEAU[cc >= (8, 0)]
    return us * 1e-6


def all_reduce_seconds(
    nbytes: float, bus_bytes_per_s: float, ranks: int, nodes: int, nvlink: bool, cc: tuple[int, int] = (8, 0)
) -> float:
    """Seconds of one all-reduce of ``nbytes`` over ``ranks`` on ``nodes`` at the links' bus bandwidth
    (``bus_bytes_per_s``), as NCCL picks it: the faster of its ring (2·(n − 1)/n of the buffer through each link after
    :func:`ring_latency_seconds`) and its tree (up and down a tree: 6.8 µs and two passes of the node's ranks' steps
    and log2(nodes) network levels, at :data:`NCCL_TREE_BUS_SHARE` of half the bus bandwidth times its correction for
    the message size), Simple protocol (NVIDIA/nccl ``src/graph/tuning.cc``, ``ncclTopoTuneModel`` and
    ``ncclTopoGetAlgoTime``, at 5067397c). Across many nodes the tree's log2 latency wins for DDP's 25 MiB buckets; the
    ring wins for large buffers. NVLink SHARP (NVLS) and CollNet, which need switch support, are not priced."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    nodes = max(min(nodes, ranks), 1)
    ring = (
        ring_latency_seconds("all_reduce", ranks, nodes, nvlink, cc)
        + 2 * (ranks - 1) / ranks * nbytes / bus_bytes_per_s
    )
    intra = NCCL_TREE_HOP_LATENCY_US["nvlink" if nvlink else "pci"]
    levels = max(nodes.bit_length() - 1, 0)  # NCCL's log2i: floor(log2(nodes))
    latency = NCCL_TREE_BASE_LATENCY_US + 2 * ((ranks // nodes - 1) * intra + levels * NCCL_TREE_HOP_LATENCY_US["net"])
    size = int(nbytes) >> 6
    log = size.bit_length() - 1 if size else -1
    correction = NCCL_TREE_CORRECTION[log] if 0 <= log < len(NCCL_TREE_CORRECTION) else 1.0
    tree = latency * 1e-6 + nbytes / (0.5 * NCCL_TREE_BUS_SHARE * correction * bus_bytes_per_s)
    return min(ring, tree)


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
