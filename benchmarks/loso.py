"""Leave-one-source-out (LOSO) cross-validation of the constants fitted to the published runs (issue 43).

A constant chosen on the runs it is then scored on cannot show how it does beyond them. Here every constant fitted to
``benchmarks/published/*.jsonl`` is refitted, on its grid and by its own criterion, once per source without that
source's runs, and the source's runs are scored at the refitted value; the in-sample figures (every source in the fit,
advisor's shipped constants) stand beside them. A source is a publisher and its code: torchtitan's A100, H100 and H200
pages are one source (:func:`source_group`).

The constants fitted to the published runs (:data:`FITTED`):

- the speed model's GEMM ceiling and bandwidth share (``advisor.engine.speed.TENSOR16_TOP``, ``BANDWIDTH_SHARE``),
  jointly: the pair with the most runs' tokens/s per GPU within 1.25x of the published, then the least median
  |log(predicted / published)|, then the nearest to advisor's; this project's H100 trials (step time) count as runs
  too, as when the constants were chosen, and are in every fit (:data:`TRIALS`: not a published source, not scored);
- the fit verdict's tight limit (``advisor.engine.bands.TIGHT_LIMIT``): the limit whose three-state verdicts agree
  with the most published ones (ran: fits or tight; out of memory: does not fit), the nearest to advisor's on a tie.

The other constants were fitted to data outside the published runs (:data:`FITTED_ELSEWHERE`): leaving a published
source out does not move them, so their LOSO figures are their in-sample ones; each names what it was fitted to, and
those fitted to a single source are named as such. The allocator's are also refitted on the published readings, as a
check only (:func:`allocator_check`).

The uncertainty bands (``advisor/data/bands.json``, :mod:`advisor.engine.bands`) are the LOSO residuals per class of
plan: memory (predicted / measured - 1) and step time (published / predicted tokens/s - 1).

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/published.py (runs this too); this module alone:
HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/loso.py [--write-bands]; 25 passes over the rated runs and 16 over the
memory readings, a minute or two on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.engine import allocator, bands, speed  # noqa: E402
from advisor.engine.bands import Verdict  # noqa: E402
from benchmarks import published, speed_fit  # noqa: E402
from benchmarks.published import Result, within  # noqa: E402

BANDS = ROOT / "advisor" / "data" / "bands.json"
#: The source name of this project's H100 trials in the speed fit (``benchmarks/results/validate_h100-sxm.jsonl``):
#: fitted on with every published source, as the speed constants were, and never scored here.
TRIALS = "h100-trials"
Point = tuple[float, ...]


@dataclass(frozen=True)
class Fitted:
    """Constants of one module fitted together on a grid to the published runs, by ``loss`` (least is best)."""

    module: ModuleType
    names: tuple[str, ...]
    grid: tuple[Point, ...]
    criterion: str

    def shipped(self) -> Point:
        """advisor's values."""
        return tuple(getattr(self.module, n) for n in self.names)

    def label(self, point: Point | None = None) -> str:
        """``NAME=value, ...`` (advisor's values by default)."""
        return ", ".join(f"{n}={v:g}" for n, v in zip(self.names, point or self.shipped()))


SPEED = Fitted(
    speed,
    ("TENSOR16_TOP", "BANDWIDTH_SHARE"),
    tuple((t, s) for t in (0.7, 0.75, 0.8, 0.85, 0.9) for s in (0.6, 0.7, 0.8, 0.9, 1.0)),
    "most runs' tokens/s per GPU within 1.25x, then least median |log(predicted / published)|",
)
TIGHT = Fitted(
    bands,
    ("TIGHT_LIMIT",),
    tuple((x,) for x in (0.95, 1.0, 1.05, 1.1, 1.15, 1.2)),
    "most three-state verdicts agreeing with the published ones (ran / out of memory)",
)
FITTED = (SPEED, TIGHT)
#: The allocator's constants, fitted elsewhere (:data:`FITTED_ELSEWHERE`), refitted here on the published readings of
#: reserved or device memory as a check only (:func:`allocator_check`): would these runs choose them, and would what
#: they choose hold for a source left out?
ALLOCATOR = Fitted(
    allocator,
    ("TRANSIENT_RESERVE", "TRANSIENT_RESERVE_CAP_BYTES"),
    tuple((r, c * 2**30) for r in (1.1, 1.25, 1.4, 1.6) for c in (1, 2, 4, 1024)),
    "least median |error| over the readings of max_memory_reserved and NVML's used memory",
)

#: The constants fitted to data outside the published runs: (constant, what it was fitted to, one source or more).
FITTED_ELSEWHERE = (
    ("speed.TENSOR16_TOP_VOLTA", "the HF guide's V100 BERT rows (the seeds), refitted under the GEMM roofline", True),
    ("gemm.SMS, gemm.TILE", "NVIDIA's architecture whitepapers and its GEMM guide: taken, not fitted", False),
    ("speed._efficiency's CPU curve (0.50)", "advisor validate on one 2-core Xeon (validate_cpu.md)", True),
    (
        "gemm.FP8_CAST_BYTES (fp8's gain by GEMM shape)",
        "torchao's float8 casting code and Transformer Engine's FP8 primer: counted, not fitted",
        False,
    ),
    (
        "overheads.KERNELS_PER_BLOCK, KERNELS_PER_ADAPTER, KERNELS_PER_STEP, MATMULS_PER_BLOCK",
        "the kernels of a Llama block's step counted on fake tensors (benchmarks/count_kernels.py): counted, not fitted",
        False,
    ),
    (
        "overheads.DEQUANT_KERNELS, NF4_BLOCK, ZERO3_OPS_PER_FETCH, FSDP_OPS_PER_COLLECTIVE; experts.LAUNCH_SECONDS",
        "bitsandbytes', DeepSpeed's and FSDP2's source and PyTorch's tuning guide: taken, not fitted",
        False,
    ),
    ("kernels' attention efficiency", "the FlashAttention-2 / -3 papers' figures", False),
    ("allocator.TRANSIENT_RESERVE, ALLOCATOR_SLACK_BYTES", "the HF guide's nine V100 bert-large rows", True),
    ("allocator.TRANSIENT_RESERVE_CAP_BYTES", "this project's H100 trials (validate_h100-sxm.jsonl)", True),
    ("data/activations.json", "simulated steps on fake tensors (counted, per family and class of step)", False),
    ("data/traffic.json", "simulated steps' memory traffic, op by op", False),
    (
        "collectives.NCCL_BASE_LATENCY_US, NCCL_HOP_LATENCY_US, NCCL_RING_PLATEAU",
        "NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc, ring / Simple): taken, not fitted",
        False,
    ),
)


#: Changes to the speed model tried against these runs and judged by LOSO (issue 43), with what it showed.
TRIED = (
    (
        "torchtitan's asynchronous tensor parallel priced (`--async-tp`, `stack.async_tp` on the runs whose source "
        "ran it: tensor parallel's collectives decomposed to run beside the partial matmuls, so a micro-batch waits "
        "for 1/t of them and for what exceeds its compute; Wang et al., ASPLOS '23; torchtitan's micro-pipelined TP "
        "under torch.compile), where the vanilla and async rows had priced alike; taken from the design, not fitted "
        "(2026-11-29)",
        "speed ratios 73 → 74 of 80 in-sample, 72 → 73 LOSO (the 70B fp8 + async TP run against bf16 vanilla 0.72 → "
        "0.81); throughput within 1.25x 81 → 80 of 87 in-sample, 79 → 78 LOSO: the 8B bf16 async-TP run 1.21 → 1.30 "
        "optimistic (the decomposed matmuls of an 8B's TP 8 shards are small: the measured gain is 1.10x, priced "
        "1.18x). The grid's choice stays 0.75 / 0.8. Adopted: a stack the runs state, priced from its design.",
    ),
    (
        "NCCL's current tuning constants and its tree all-reduce (`collectives.all_reduce_seconds`, NVIDIA/nccl "
        "src/graph/tuning.cc at 5067397c, unchanged since 2.18.1: a network ring step 14 µs (was 9.6), the multi-node "
        "ring all-reduce plateau 1.4 on compute capability 8.0+ (was 1.9 everywhere), and an all-reduce as the faster "
        "of the ring and the tree, whose latency grows with log2(nodes)); taken from the code, not fitted "
        "(2026-11-29)",
        "at 0.8 / 0.8: speed ratios 69 of 77 either way, throughput within 1.25x 77 → 75 of 83 in-sample and LOSO: "
        "the Megatron-LM paper's 2021 PTD-P runs, whose data-parallel all-reduces across nodes now take the 1.4 "
        "plateau or the tree, went 1.19-1.25 → 1.23-1.27 optimistic (they ran a 2021 NCCL, before 2.18's constants). "
        "The grid's choice with every source in the fit moved to 0.75 / 0.8 (89 within 1.25x against 0.8's 87; "
        "shipped): ratios 70 of 77 in-sample, 69 LOSO; throughput 1.02 with 77 of 83 in-sample, 75 LOSO. Adopted: "
        "the plans advisor emits run today's NCCL.",
    ),
    (
        "a mixture of experts' routing traffic (`traffic.routing_traffic_bytes`: transformers' `grouped_mm` experts' "
        "sort, gather, weighting, reorder, fp32 sum and their scatters in the backward, a·S·h + b·S·f bytes a block "
        "per phase, counted on fake-tensor steps of three shipped MoE configs and fitted to those counts, "
        "`benchmarks/count_moe_routing.py`; not fitted to any run's speed), where the dense kin's column had priced "
        "none of it (2026-11-29)",
        "speed ratios 68 → 69 of 77 in-sample and LOSO (fms-acceleration's QLoRA Mixtral on two A100s against "
        "Mistral on one 1.25 → 1.20; on one A100 1.16 → 1.12), throughput 77 of 83 within 1.25x either way (the two "
        "Mixtral runs 1.14 / 1.23 → 1.10 / 1.18 predicted / published); the grid's choice stays 0.8 / 0.8. Adopted.",
    ),
    (
        "expert parallelism's all-to-all across nodes priced by what crosses the network (`communication."
        "all_to_all_seconds`: a GPU's (e - g)/e of its tokens for other nodes, the node's g GPUs sharing its NICs, "
        "the longer of that and the NVLink share), where a ring's price (15/16 of one GPU's bytes over the node's "
        "network) had been used; counted from the exchange's pattern, not fitted (2026-11-29)",
        "speed ratios 67 → 68 of 77 in-sample and LOSO, throughput 76 → 77 of 83 within 1.25x; the grid's choice "
        "stays 0.8 / 0.8. The one run it moves is Megatron-Bridge's Qwen3-30B-A3B with EP 16 over two DGX H100s "
        "(1.42 → 0.90 predicted / published, its ratio 1.58 → 0.97): but that run's HybridEP dispatcher sends a "
        "token once per remote node, about a quarter of the plain all-to-all's bytes between nodes, so its price "
        "now carries about 0.2 s a micro-batch of exchange the run does not make, where the MoE's own costs "
        "(routing, permutation, launches) that made it 1.4x optimistic are still unpriced: it agrees by offsetting "
        "errors. Adopted for the plans advisor makes (DeepSpeed-MoE's and Megatron-Core's plain all-to-all), "
        "with that run named as not evidence for it.",
    ),
    (
        "the multi-node runs priced with the network their sources state (`published._network`): torchtitan's "
        "'RDMA 400 Gb/s per GPU between hosts' as 400 Gb/s a NIC and one NIC a GPU, and the named DGX H100's 400 Gb/s "
        "ConnectX-7 adapters (DGX BasePOD reference architecture), where both had been priced at the catalog's 200 Gb/s HDR (a mapping "
        "fix, not a fit; the Megatron-LM paper's Selene states 200 Gb/s HDR, unchanged; 2026-11-29)",
        "speed ratios in-sample 66 → 68, LOSO 65 → 67 of 77 (NeMo AutoModel's LoRA runs against its 64-GPU "
        "pre-training baseline 1.21-1.28 → 1.10-1.21: the baseline's FSDP traffic over 8 nodes had been priced at "
        "half the network; Megatron-Bridge's Qwen3-30B-A3B against its Llama-3-70B baseline 1.36 → 1.58, the MoE now "
        "the more optimistic); throughput within 1.25x 77 → 76 of 83. The grid's choice with every source in the "
        "fit moved from 0.75 / 0.8 back to 0.8 / 0.8 (88 within 1.25x each, median |log| 0.081 against 0.089; "
        "shipped), after which the ratios are 67 of 77 in-sample and LOSO. Adopted.",
    ),
    (
        "a tensor-parallel rank's own GEMM shapes in the roofline (`gemm.gemm_shapes(..., split=t)`: 1/t of the heads, "
        "key / value heads fewer than t replicated, 1/t of the MLP width and of the vocabulary-parallel LM head; "
        "Megatron-LM's column / row-parallel layers, torchtitan's TP plan), where every rank had priced the whole "
        "layer's shapes at 1/t of the FLOPs (counted, not fitted; 2026-11-29, on the 213 cases of 12 sources)",
        "LOSO throughput 1.03 with 69 of 83 within 1.25x → 1.02 with 77 of 83 (torchtitan's FSDP × TP8 runs: an 8B's "
        "key / value projections of 128 columns a rank are memory-bound on an H100), speed ratios 67 → 65 of 77; the "
        "grid's choice with every source in the fit moved from 0.7 / 0.9 to 0.75 / 0.8 (shipped). Adopted.",
    ),
    (
        "ZeRO-3's calls: one `all_gather_coalesced` per fetched linear layer (was one per block) and a third gather of "
        "a checkpointed block holding more than `stage3_max_reuse_distance` (1e9 elements) (DeepSpeed's "
        "partitioned_param_coordinator and config docs; taken, not fitted)",
        "LOSO unchanged (throughput 1.03, 69 of 83; ratios 67 of 77), in-sample ratios 66 → 67; the Megatron-LM "
        "paper's 174.6B ZeRO-3 on 1536 A100s 17.1 → 25.2 s a step against its published 67 s: DeepSpeed's ZeRO-3 of "
        "2021 at that scale is still 2-3x slower than priced. Adopted.",
    ),
    (
        "per-step fixed costs (`advisor/engine/overheads.py`): a kernel-launch floor per micro-batch (the kernels of a "
        "Llama block counted on fake tensors × 10 µs a launch; compiled: twice the matmuls), QLoRA's dequantization from "
        "bitsandbytes' `dequantize_4bit` (0.5 B + absmax, double quantization's absmax pass, the weight written in its "
        "stored dtype, and its kernels), ZeRO-3's per-submodule fetches and FSDP's per-unit copies as launches",
        "in-sample and LOSO unchanged at two digits (throughput 0.99, 47 of 47; the QLoRA runs move by 0.01-0.03): the "
        "published runs are long micro-batches, where the floor does not bind; it binds for short sequences and small "
        "models (gpt2-xl under ZeRO-3 on one A100 at 128 tokens: 76.9 → 97.8 ms a step). Adopted.",
    ),
    (
        "multi-node DeepSpeed (issue 43: one GPU → 2 nodes × 2 GPUs predicted 1.00x, measured 0.57x), checked against "
        "NCCL's tuning model (`src/graph/tuning.cc`: ring bandwidth per channel, the network's per-hop latency, the "
        "all-reduce plateau), which `collectives.py` and `communication.py` already follow",
        "no change made: "
        "OPT-1.3B full fine-tuning under ZeRO-2 (A100 40GB, 8 × 512 tokens a GPU) per GPU against one GPU is 0.93x over "
        "InfiniBand (the default when a source states no network), 0.57x over one 100 Gb/s Ethernet NIC a node and "
        "0.20x at 25 Gb/s; ZeRO-3 0.93 / 0.49 / 0.13x. The public drop matches a slower link than the default, which "
        "`--interconnect` / `--inter-node-gbps` state; no published run here has two nodes of DeepSpeed to judge it.",
    ),
    (
        "QLoRA's dequantization without the GEMM's read-back of the 16-bit copy (2.77 B a weight; the roofline already "
        "counts the GEMM's operand read)",
        "in-sample 46 of 47 within 1.25x, LOSO 0.99 and 43 of 47 (fms-acceleration's "
        "QLoRA Mixtral on 2 A100s 1.23 → 1.28 predicted / published; the refits without flash-attention, NeMo AutoModel "
        "and NeMo move to 0.9 / 0.7, 0.9 / 0.6 and 0.75 / 0.8). Not adopted: the read-back stays counted "
        "(`overheads.READ_BACK_BYTES`).",
    ),
    (
        "fp8's gain by GEMM shape (`gemm.fp8_speedup`: the roofline at fp8's doubled rate with 1-byte operands, plus the "
        "dynamic casts: torchao's 2·m·k + 2·k·n + m·n elements a layer at `FP8_CAST_BYTES` 5 B) instead of "
        "`FP8_GEMM_SPEEDUP` 1.5, with the dense roofline's routed-expert shapes left out (issue 43's known "
        "inconsistency)",
        "with torchao's casts for every fp8 run: in-sample throughput 0.99, 46 of 47 within 1.25x, "
        "LOSO 0.99, 46 of 47, ratios 43 of 44 (was 47, 47, 44): NeMo's Transformer Engine runs fell 0.81-0.94 → "
        "0.77-0.90. Priced then as Transformer Engine runs them under Megatron-style code (`TE_GRAD_CAST_BYTES`, "
        "`TE_WEIGHT_CAST_BYTES`: the input's cast fused into the norm or activation, the gradient's cast-transpose, the "
        "weights cast once a step): in-sample and LOSO throughput 1.00, 47 of 47 (NeMo 0.87 → 0.97, torchtitan's 8B "
        "float8 runs 1.06-1.09 → 1.02-1.04, its 70B 2D runs 1.13-1.19 → 1.18-1.24), ratios 43 of 44: the one out is "
        "fms-acceleration's QLoRA Mixtral on 2 A100s against Mistral on one (1.25 → 1.26), moved by the dense roofline's "
        "fix, not by fp8. Adopted: counted, not fitted, and within the issue's bars. Also tried: casts of 3 B (LOSO "
        "0.95, 47 of 47; in-sample 45) and 1 B (LOSO 0.98, 43 of 47) for torchao, and the routed experts' own shapes "
        "for their efficiency (in-sample 45, LOSO 1.03 and 43 of 47: Mixtral QLoRA on 2 A100s 1.26); not adopted. The "
        "gain it prices on an H100 for Llama-2-7B: 0.86x at 512 tokens a micro-batch, 1.34x at 4096, 1.53x at 131k "
        "(torchao's casts).",
    ),
    (
        "a GEMM ceiling of its own for Hopper (`TENSOR16_TOP_HOPPER`, 0.6-0.85, refitted jointly with the two above)",
        "in-sample it chose 0.85, above Ampere's; LOSO throughput fell from 47 to 41 of 47 within 1.25x (median 0.98 → "
        "0.96; NeMo's six H100 runs 6 → 3, torchtitan 19 → 16): one more constant fitted to the same five sources "
        "overfits them. Not adopted.",
    ),
    (
        "QLoRA's dequantization traffic (`communication.DEQUANT_BYTES_PER_PARAM`) at 9, 18 or 27 B a weight instead of "
        "4.5",
        "in-sample the QLoRA runs' median went 0.98 → 0.97 / 0.95 / 0.93, all 8 within 1.25x, the speed ratios 43 "
        "→ 44 of 44; but one source only (fms-acceleration's runs in hf-qlora) publishes a QLoRA rate, so leaving it out "
        "leaves nothing to refit on: LOSO cannot judge it. Not adopted.",
    ),
    (
        "fp8's former one GEMM speed-up (`speed.FP8_GEMM_SPEEDUP`, checked not fitted at 1.5) refitted on 1.2-1.8 jointly with the "
        "two above",
        "the two sources with fp8 runs pull apart (NeMo's Transformer Engine runs alone choose 1.6, "
        "torchtitan's float8 runs 1.2); each left out, the other sets it (1.2 / 1.8) and LOSO throughput falls to 42 of "
        "47 within 1.25x (NeMo 6 → 3, torchtitan 19 → 17), the ratios to 42 of 44. Not adopted: the fp8 gain by shape "
        "needs sources that agree on it.",
    ),
    (
        "LoRA's adapter matmuls priced as memory-bound traffic (rank r: 2·r FLOPs a byte, below every GPU's ridge point; "
        "(3 + r) × Σ(d_in + d_out) × 2 B a token, counted, not fitted)",
        "in-sample throughput 0.98 → 0.97, 47 → 46 of 47 "
        "within 1.25x; LOSO 0.99 → 1.00 but 47 → 44 of 47 (hf-qlora refits to BANDWIDTH_SHARE 0.9 and keeps 10 of 11; "
        "NeMo AutoModel 6 → 4: its one-H100 LoRA runs fall to 0.80 / 0.79 predicted / published while its multi-GPU "
        "ones improve from 1.09-1.14 to 1.03-1.09). The runs do not support it as counted (the input read by the "
        "adapter's first matmul may still sit in L2 after the frozen layer's); not adopted.",
    ),
    (
        "NCCL's per-call latency (`advisor/engine/collectives.py`: its tuning model's ring / Simple constants, not "
        "fitted) per DDP or ZeRO bucket and per FSDP / ZeRO-3 unit",
        "in-sample unchanged at two digits (throughput "
        "0.98, 47 of 47; torchtitan's 128-H100 runs 1.08 → 1.07, 1.19 → 1.18, 1.11 → 1.10 predicted / published); LOSO "
        "1.00 → 0.99, 47 of 47. Adopted: it holds, and prices the many-node and small-message cases the runs "
        "barely reach.",
    ),
    (
        "GEMM efficiency as a roofline over the step's GEMM shapes at each GPU's ridge point (`advisor/engine/gemm.py`: "
        "FLOPs at TENSOR16_TOP of the peak plus the operands' bytes at the usable bandwidth) instead of the fitted "
        "saturation in tokens (half at 1.5e6 / h) and width (h / (h + 256))",
        "with NCCL's latency in: in-sample "
        "throughput 0.98 → 1.00, speed ratios 43 → 44 of 44; LOSO 0.99 → 1.00, 47 of 47, and every refit without one "
        "source lands on advisor's 0.8 / 0.8 (before: 0.85 / 0.7). With the SMs a short GEMM's tiles leave idle "
        "(whitepaper SM counts, 128 x 128 tiles), which only short micro-batches reach: in-sample and LOSO 0.99, 47 of "
        "47, ratios 44 of 44, refits unmoved. Adopted, with the fill; TENSOR16_TOP_VOLTA refitted 0.50 → 0.25 to keep "
        "the seeds' V100 figures.",
    ),
    (
        "the same roofline multiplied by the former saturation in tokens (keeping its small-GEMM penalty)",
        "in-sample throughput 0.98, 46 of 47 within 1.25x: worse than the roofline alone before LOSO; not adopted.",
    ),
)


def source_group(source: str) -> str:
    """The source a run counts under for LOSO: its file, torchtitan's three GPU pages as one."""
    return "torchtitan" if source.startswith("torchtitan") else source


#: Changes to the memory model tried against these runs (issue 43's memory items), with what they showed.
TRIED_MEMORY = (
    (
        "bitsandbytes' paged optimizer states in CUDA unified memory (`advisor/engine/paged.py`, from its source: "
        "`Optimizer8bit.get_state_buffer` pages tensors of 100,000 elements or more through `cudaMallocManaged`): out of "
        "the live-tensor peak, resident in device memory while it has room, a plan that fits only with them evicted "
        "tight",
        "in-sample and LOSO memory median 3.8 % → 3.8 %, three-state verdicts 141 → 141 of 150; 13 LitGPT "
        "config-hub QLoRA runs (LitGPT builds `bnb.optim.PagedAdamW`; their adapter matrices of r·d >= 1e5) 0.1-0.3 GiB "
        "lower (-9.5..-11.0 % → -10.1..-12.2 %), as their `max_memory_allocated` reading does not count managed memory. "
        "Adopted (taken from the code, nothing fitted).",
    ),
    (
        "Liger's fused linear cross-entropy holding the head's whole gradient and the hidden state's from the loss "
        "through the backward (`structural.fused_loss_head_bytes`, from `liger_kernel/ops/fused_linear_cross_entropy.py`)",
        "no published run here uses Liger's fused loss (NeMo AutoModel's two run its layers only): unchanged. Adopted "
        "(from the code; on full fine-tuning under FSDP it adds V·h·2 B a rank, 1.1 GiB for Gemma-2-2B).",
    ),
    (
        "a Python tanh GELU class by model type (`kernels.PYTHON_GELU_MODEL_TYPES`: three more MLP-wide tensors in the "
        "structural formula)",
        "published figures unchanged (GPT-2 and Phi are calibrated); against simulated steps "
        "GPT-J -44/-34 % → -24/-18 %, GPT-Neo -26/-22 % → -16/-12 %, MPT (one GELU kernel) unchanged at -6.3/-3.2 %. "
        "Adopted.",
    ),
    (
        "a larger transient reserve for the plans that gather through `recordStream` (FSDP1, ZeRO-3): 1.4 or 1.6 instead "
        "of 1.25",
        "in-sample memory median 3.8 → 3.7 / 3.8 %, fit at the margin 135 → 133 / 133 of 150, three-state "
        "140 / 140 (LOSO 139 / 136); Answer.AI's FSDP1 QLoRA `max_memory_reserved` readings, priced -4.2..+14.8 %, move "
        "to -0.4..+18.1 % / +0.7..+22.4 %. The one source here with FSDP1 reserved readings does not support the "
        "kept-aside family's -24 %. Not adopted.",
    ),
    (
        "ZeRO-3's gathered parameters by DeepSpeed's reuse window (`stage3_max_reuse_distance` and "
        "`stage3_max_live_parameters`, 1e9 elements by default: `partitioned_param_coordinator.py` "
        "`__params_to_release` keeps what the trace reuses within that many elements)",
        "at the forward's end that keeps "
        "about (1e9 - head) / 2 elements of the last blocks, for 1-8B models within the two largest tensors advisor "
        "prices; no published ZeRO-3 run here has a reading (the one case names no GPU). Not changed.",
    ),
    (
        "QLoRA's dequantization buffers",
        "bitsandbytes' `MatMul4Bit` dequantizes one weight at a time in the forward "
        "and again in the backward (`F.dequantize_4bit(B, quant_state).to(A.dtype)`), saves none (`ctx.tensors = (None, "
        "B)`); advisor holds two 16-bit copies of the largest block matrix: already priced. The LitGPT config-hub QLoRA "
        "runs' -10..-12 % would need about 12 such copies on a 7B: not this buffer. Not changed.",
    ),
)


@contextmanager
def values(fitted: Fitted, point: Point) -> Iterator[None]:
    """The fitted constants set to ``point`` for the block, restored after."""
    before = fitted.shipped()
    try:
        for name, value in zip(fitted.names, point):
            setattr(fitted.module, name, value)
        yield
    finally:
        for name, value in zip(fitted.names, before):
            setattr(fitted.module, name, value)


def throughput_ratios(results: list[Result]) -> list[float]:
    """Predicted / published tokens/s per GPU of the runs that publish it."""
    return [
        r.rate_predicted / r.rate_published
        for r in results
        if not r.skipped and r.rate_published and r.per_gpu and r.rate_unit == "tokens/s/GPU"
    ]


def speed_loss(results: list[Result], point: Point = ()) -> tuple[float, float]:
    """:data:`SPEED`'s criterion (least is best; the results were priced at ``point``)."""
    rates = throughput_ratios(results)
    if not rates:
        return (0.0, 0.0)
    return (-sum(map(within, rates)), statistics.median(abs(math.log(x)) for x in rates))


def verdict_at(r: Result, limit: float) -> Verdict:
    """The three-state verdict of a run's device memory with the tight limit at ``limit`` (the host's RAM aside)."""
    if r.device_bytes <= r.usable_bytes:
        return Verdict.FITS
    return Verdict.TIGHT if r.device_bytes <= r.capacity_bytes * limit else Verdict.NO_FIT


def agrees(r: Result, verdict: Verdict) -> bool:
    """Whether a verdict agrees with the published one: a run that ran fits or is tight, an out-of-memory does not."""
    return r.fits_published == (verdict != Verdict.NO_FIT)


def fit_loss(results: list[Result], point: Point) -> tuple[float]:
    """:data:`TIGHT`'s criterion: minus the published verdicts agreeing with the limit at ``point``."""
    return (
        -sum(agrees(r, verdict_at(r, point[0])) for r in results if r.fits_published is not None and not r.skipped),
    )


Loss = Callable[[list[Result], Point], tuple]


def refit(grid: dict[Point, list[Result]], loss: Loss, keep: Callable[[Result], bool], shipped: Point) -> Point:
    """The grid point of least ``loss`` over the runs ``keep`` keeps (each point's runs priced at it); ties: the
    nearest to ``shipped``, then the smallest."""

    def key(p: Point) -> tuple:
        return (*loss([r for r in grid[p] if keep(r)], p), sum(abs(a - b) for a, b in zip(p, shipped)), p)

    return min(grid, key=key)


def speed_grid(cases: list[dict], trials: list | None = None) -> dict[Point, list[Result]]:
    """Every rated case priced at each point of :data:`SPEED`'s grid, with this project's H100 trials
    (``speed_fit.device_trials``; default: none) as runs of :data:`TRIALS`, always in the fit, never scored."""
    rated = [c for c in cases if c["measured"].get("tokens_per_s_per_gpu") or c["measured"].get("samples_per_s")]
    grid = {}
    for point in SPEED.grid:
        with values(SPEED, point):
            device, _ = speed_fit.evaluate(trials, []) if trials else ([], [])
            grid[point] = [published.run_case(c) for c in rated] + [
                Result(
                    id=f"{TRIALS}:{name}",
                    source=TRIALS,
                    model="",
                    gpu="h100-sxm",
                    rate_unit="tokens/s/GPU",
                    rate_published=1.0,
                    rate_predicted=1 / ratio,
                    per_gpu=True,
                )
                for name, ratio in device
            ]
    return grid


@dataclass
class CrossValidation:
    """The runs in-sample (advisor's constants) and LOSO (each at the constants refitted without its source)."""

    in_sample: list[Result]
    loso: list[Result]
    refits: dict[str, dict[str, Point]]  #: per fitted constants' label, per source left out: the refit
    alone: dict[str, dict[str, Point]]  #: per fitted constants' label, per source: the fit on its runs alone

    @property
    def sources(self) -> list[str]:
        """The sources of the priced runs."""
        return sorted({source_group(r.source) for r in self.in_sample if not r.skipped})


def cross_validate(results: list[Result], cases: list[dict], trials: list | None = None) -> CrossValidation:
    """Refit every :data:`FITTED` constant without each source and score that source's runs at the refit (``trials``:
    :func:`speed_grid`'s)."""
    sources = sorted({source_group(r.source) for r in results if not r.skipped})
    loso = {r.id: r for r in results}
    grids = {
        SPEED.label(): (SPEED, speed_grid(cases, trials), speed_loss),
        TIGHT.label(): (TIGHT, {p: results for p in TIGHT.grid}, fit_loss),
    }
    refits: dict[str, dict[str, Point]] = {}
    alone: dict[str, dict[str, Point]] = {}
    for label, (fitted, grid, loss) in grids.items():
        refits[label], alone[label] = {}, {}
        for s in sources:
            point = refit(grid, loss, lambda r, s=s: source_group(r.source) != s, fitted.shipped())
            alone[label][s] = refit(grid, loss, lambda r, s=s: source_group(r.source) == s, fitted.shipped())
            refits[label][s] = point
            for r in grid[point]:
                if source_group(r.source) == s and not r.skipped:
                    held = loso[r.id]
                    if fitted is TIGHT:
                        loso[r.id] = replace(held, verdict=verdict_at(held, point[0]).value)
                    else:
                        loso[r.id] = replace(r, verdict=held.verdict)
    return CrossValidation(results, [loso[r.id] for r in results], refits, alone)


def figures(results: list[Result]) -> dict[str, str]:
    """The issue's four figures (memory, fit, ratios, throughput) and the three-state verdict's agreement."""
    run = [r for r in results if not r.skipped]
    errors = [abs(r.memory_error) for r in run if r.memory_error is not None]
    judged = [r for r in run if r.fits_published is not None]
    pairs = [x for *_, x in published.ratios(results)]
    rates = throughput_ratios(results)
    rate = f"{statistics.median(rates):.2f}; " if rates else ""
    return {
        "memory, median abs. error": f"{statistics.median(errors):.1%} (n={len(errors)})" if errors else "n=0",
        "fit at the planning margin agrees": f"{sum(r.fits_published == r.fits_predicted for r in judged)} of "
        f"{len(judged)}",
        "three-state verdict agrees (ran: fits / tight)": f"{sum(agrees(r, Verdict(r.verdict)) for r in judged)} of "
        f"{len(judged)}",
        "speed ratios within 1.25x": f"{sum(map(within, pairs))} of {len(pairs)}",
        "throughput, median predicted/published; within 1.25x": f"{rate}{sum(map(within, rates))} of {len(rates)}",
    }


def residuals(results: list[Result]) -> dict[str, dict[str, list[float]]]:
    """Per kind (memory, step_time), per class and each coarser class (:func:`advisor.engine.bands.coarser`), the
    runs' residuals: memory predicted / measured - 1, step time published / predicted tokens/s - 1."""
    out: dict[str, dict[str, list[float]]] = {"memory": {}, "step_time": {}}
    for r in results:
        if r.skipped or not r.plan_class or any(MISREPORTED in why for why in r.why):
            continue
        kinds = {
            "memory": r.memory_error,
            "step_time": r.rate_published / r.rate_predicted - 1 if throughput_ratios([r]) else None,
        }
        for kind, value in kinds.items():
            if value is not None:
                for key in bands.coarser(r.plan_class):
                    out[kind].setdefault(key, []).append(value)
    return out


#: The words of ``published._states_check``: a reading below the stated plan's model states, which that plan cannot
#: have produced; such runs count in the figures but give the bands no residual.
MISREPORTED = "setup likely misreported"


def band_table(results: list[Result]) -> dict:
    """``advisor/data/bands.json``: per kind and class with :data:`~advisor.engine.bands.MIN_RESIDUALS` residuals,
    the :data:`~advisor.engine.bands.BAND_QUANTILE` quantile of their absolute values (the band) and their count."""
    table: dict[str, dict] = {}
    for kind, classes in residuals(results).items():
        table[kind] = {}
        for key, values_ in sorted(classes.items()):
            if len(values_) >= bands.MIN_RESIDUALS:
                ordered = sorted(map(abs, values_))
                at = ordered[min(int(bands.BAND_QUANTILE * len(ordered)), len(ordered) - 1)]
                table[kind][key] = {"band": round(at, 3), "n": len(values_)}
    return table


def allocator_errors(results: list[Result]) -> list[float]:
    """The memory errors of the runs whose reading includes the allocator's reserve (reserved or NVML's used)."""
    return [
        r.memory_error
        for r in results
        if not r.skipped and r.memory_error is not None and r.memory_quantity != "max_memory_allocated"
    ]


def allocator_loss(results: list[Result], point: Point = ()) -> tuple[float]:
    """:data:`ALLOCATOR`'s criterion."""
    errors = allocator_errors(results)
    return (statistics.median(map(abs, errors)) if errors else 0.0,)


def allocator_check(cases: list[dict]) -> list[str]:
    """:data:`ALLOCATOR` refitted on the published readings, in-sample and leave-one-source-out, beside advisor's."""
    read = [c for c in cases if c["measured"].get("memory_quantity") in ("max_memory_reserved", "nvml_used")]
    grid = {}
    for point in ALLOCATOR.grid:
        with values(ALLOCATOR, point):
            grid[point] = [published.run_case(c) for c in read]
    shipped, sources = (
        ALLOCATOR.shipped(),
        sorted({source_group(r.source) for r in grid[ALLOCATOR.shipped()] if r.memory_error is not None}),
    )
    everyone = refit(grid, allocator_loss, lambda r: True, shipped)
    held = []
    for s in sources:
        point = refit(grid, allocator_loss, lambda r, s=s: source_group(r.source) != s, shipped)
        held += [(s, point, e) for e in allocator_errors([r for r in grid[point] if source_group(r.source) == s])]

    def label(point: Point) -> str:
        return f"reserve {point[0]:g}, cap {point[1] / 2**30:g} GiB"

    def median(errors: list[float]) -> str:
        return f"{statistics.median(map(abs, errors)):.1%}"

    return [
        f"- `allocator.TRANSIENT_RESERVE, TRANSIENT_RESERVE_CAP_BYTES` refitted on these runs as a check "
        f"({ALLOCATOR.criterion}; {len(allocator_errors(grid[shipped]))} readings of {len(sources)} sources, "
        f"cap 1024 GiB: none): advisor's ({label(shipped)}) {median(allocator_errors(grid[shipped]))}; refitted "
        f"on all of them ({label(everyone)}) {median(allocator_errors(grid[everyone]))}; leave-one-source-out "
        f"{median([e for *_, e in held])} (refits: "
        + "; ".join(f"without {s} {label(p)}" for s, p in dict((s, p) for s, p, _ in held).items())
        + ")."
    ]


def _source_row(cv: CrossValidation, source: str) -> str:
    """One source's line: its runs, the refits without it and its figures in-sample → LOSO."""
    mine = [i for i, r in enumerate(cv.in_sample) if source_group(r.source) == source and not r.skipped]
    ins, out = [cv.in_sample[i] for i in mine], [cv.loso[i] for i in mine]
    rates_in, rates_out = throughput_ratios(ins), throughput_ratios(out)
    judged = [i for i, r in enumerate(ins) if r.fits_published is not None]

    def rate(rates: list[float]) -> str:
        return f"{statistics.median(rates):.2f} ({sum(map(within, rates))}/{len(rates)})" if rates else "-"

    verdicts = (
        f"{sum(agrees(ins[i], Verdict(ins[i].verdict)) for i in judged)} → "
        f"{sum(agrees(out[i], Verdict(out[i].verdict)) for i in judged)} of {len(judged)}"
    )
    return (
        f"| {source} | {len(ins)} | {SPEED.label(cv.refits[SPEED.label()][source])} | {rate(rates_in)} → "
        f"{rate(rates_out)} | {TIGHT.label(cv.refits[TIGHT.label()][source])} | {verdicts} |"
    )


def _support(cv: CrossValidation) -> list[str]:
    """What each fitted constant reads: the sources with runs for its criterion, what each would choose alone, where
    leaving each out moves it; those fitted elsewhere with what they were fitted to (one source: named)."""
    out = []
    for fitted in FITTED:
        label = fitted.label()
        scored = sorted(
            {
                source_group(r.source)
                for r in cv.in_sample
                if not r.skipped and (throughput_ratios([r]) if fitted is SPEED else r.fits_published is not None)
            }
        )
        alone = "; ".join(f"{s} {fitted.label(cv.alone[label][s])}" for s in scored)
        moved = sorted({fitted.label(p) for p in cv.refits[label].values()} - {label})
        single = " — **one source only**" if len(scored) <= 1 else ""
        trials = " and this project's H100 trials (always in the fit)" if fitted is SPEED else ""
        out.append(
            f"- `{label}` ({fitted.criterion}): read by the runs of {len(scored)} sources{trials}{single}; "
            f"each source alone would choose: {alone}; the refits without one source: "
            f"{', '.join(moved) or 'unmoved'}."
        )
    for name, basis, one in FITTED_ELSEWHERE:
        out.append(
            f"- `{name}`: fitted to {basis}{' — **one source**' if one else ''}; not refitted here (LOSO = in-sample)."
        )
    return out


def markdown(cv: CrossValidation, checks: list[str] = ()) -> list[str]:
    """The LOSO section of ``benchmarks/results/published.md``."""
    ins, out = figures(cv.in_sample), figures(cv.loso)
    table = json.dumps(band_table(cv.loso))
    lines = [
        "## Leave-one-source-out (issue 43)",
        "",
        "Each constant fitted to these runs refitted without the source being scored (`benchmarks/loso.py`); "
        "in-sample: advisor's constants, every source in the fit. The memory model, the fit at the planning margin "
        "and the two-state verdict read no constant fitted to these runs: their LOSO figures are the in-sample "
        "ones.",
        "",
        "| figure | in-sample | LOSO |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {ins[k]} | {out[k]} |" for k in ins]
    lines += [
        "",
        "Per source left out: its runs, the constants refitted without it, its throughput (median "
        "predicted/published, within 1.25x) and its three-state verdicts agreeing, in-sample → LOSO.",
        "",
        "| source | runs | speed refit | throughput | tight refit | verdicts |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_source_row(cv, s) for s in cv.sources]
    lines += [
        "",
        "### What each constant was fitted to",
        "",
        "A source whose runs cannot tell the grid's values apart 'chooses' advisor's (ties go to the nearest to it).",
        "",
        *_support(cv),
        *checks,
    ]
    lines += [
        "",
        "### Tried and judged by LOSO",
        "",
        *(f"- {what}: {outcome}" for what, outcome in (*TRIED, *TRIED_MEMORY)),
        "",
        "### Uncertainty bands (`advisor/data/bands.json`)",
        "",
        f"The {bands.BAND_QUANTILE:.0%} quantile of the LOSO residuals' absolute values per class "
        "(method/sharding/GPU generation; `*`: any), classes with at least "
        f"{bands.MIN_RESIDUALS} residuals; runs whose reading is below their own model states give none.",
        "",
        "| kind | class | band | residuals |",
        "|---|---|---|---|",
    ]
    for kind, classes in json.loads(table).items():
        lines += [f"| {kind} | {key} | ± {v['band']:.0%} | {v['n']} |" for key, v in classes.items()]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-bands", action="store_true", help=f"write {BANDS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    cases = published.load_cases()
    cv = cross_validate([published.run_case(c) for c in cases], cases, speed_fit.device_trials())
    if args.write_bands:
        BANDS.write_text(json.dumps(band_table(cv.loso), indent=1) + "\n", encoding="utf-8")
    print("\n".join(markdown(cv, allocator_check(cases))))


if __name__ == "__main__":
    main()
