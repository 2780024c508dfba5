"""The memory traffic of an eager training step, counted op by op on fake tensors, against the speed model's traffic
model (issue 13, item 4: why the H100 trials ran slower than first predicted).

Usage: python benchmarks/eager_traffic.py [--records benchmarks/results/validate_h100-sxm.jsonl] [--out FILE]
[--published SOURCE ...]

Each record's plan runs one micro-batch through the simulator's model (the same transformers model, PEFT adapters and
autocast as a trial; fake tensors, so nothing is computed) under a ``TorchDispatchMode`` that adds, per aten op, the
bytes of its tensor inputs and outputs: matmuls (``mm``, ``addmm``, ``bmm``...) and the fused attention kernels apart,
views and metadata ops as nothing, every other op (casts, norms, activations, dropout, rotary, residual adds, the
loss, LoRA's scaling and sums) as memory traffic. ``benchmarks/calibrate_traffic.py`` fits the same count on few-layer
designs (:mod:`advisor.engine.traffic`); here it is counted at each trial's (and published run's) own shape and set
beside what the traffic model gives there and beside the former price, the saved activations read and written
(3 + r) times (:func:`advisor.engine.memory.activation_traffic_bytes`), which had the H100 trials predicted 1.5x too
fast; with the step time the speed model now predicts and the measured (or published) one. Eager steps only:
a compiled or Liger plan's fused kernels are not what eager runs, nor do they run on fake tensors.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import published  # noqa: E402
from advisor.core.kernels import LossKernel  # noqa: E402

#: aten ops priced as matmuls or attention kernels (compute, not traffic)
COMPUTE_OPS = (
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "_scaled_mm",
    "_grouped_mm",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
)


#: aten ops that launch no memory-bound kernel besides the views (``func.is_view``): allocations, metadata, and
#: ``_unsafe_view`` (a reshape without a view's aliasing annotation)
NO_KERNEL_OPS = (
    "detach",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "alias",
    "lift_fresh",
    "_local_scalar_dense",
    "set_",
    "resize_",
    "_unsafe_view",
    "view",
    "t",
)

#: aten ops that read an input only at the rows their indices name, by the input's position: an embedding lookup
#: reads the looked-up rows (its output's bytes), not the whole table; the loss reads the target tokens'
#: log-probabilities, not every logit (its gradient is still written whole)
GATHERED_INPUTS = {"embedding": (0,), "nll_loss_forward": (0,), "nll_loss_backward": (1,)}

#: ops whose traffic the speed model prices apart: bitsandbytes' 4-bit dequantization and matmul (QLoRA's base
#: weights, ``advisor.engine.communication.DEQUANT_BYTES_PER_PARAM``)
PRICED_APART_OPS = ("dequantize_4bit", "gemm_4bit", "dequantize_blockwise", "quantize_4bit")


def former_traffic(model, plan, seq_len: int) -> float:
    """The memory traffic of one micro-batch as the speed model priced it before the count, bytes: the activations
    the forward produces, written and read back (3 + r) times (r: checkpointing's recomputed share)."""
    from advisor.engine.checkpointing import recompute_shares
    from advisor.engine.memory import activation_traffic_bytes

    return activation_traffic_bytes(model, plan, seq_len) * (3.0 + recompute_shares(model, plan)[0])


def traffic_mode():
    """A ``TorchDispatchMode`` adding each op's input and output bytes to ``.traffic`` (views and metadata ops and
    :data:`PRICED_APART_OPS`: nothing; :data:`COMPUTE_OPS`: to ``.compute_bytes``; the inputs of
    :data:`GATHERED_INPUTS`: nothing, their output counts the rows read), per op name in ``.by_op``; ``.kernels``
    counts the ops that launch a kernel (every op with a tensor output but the views and :data:`NO_KERNEL_OPS`),
    ``.compute_kernels`` those of :data:`COMPUTE_OPS`."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Traffic(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.traffic = 0
            self.compute_bytes = 0
            self.by_op: dict[str, int] = {}
            self.kernels = self.compute_kernels = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if func.is_view or name in NO_KERNEL_OPS:
                return out
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if not outputs:  # a metadata query (device, size, is_contiguous...): no kernel
                return out
            self.kernels += 1
            if name in PRICED_APART_OPS:
                return out
            gathered = GATHERED_INPUTS.get(name, ())
            inputs = [a for i, a in enumerate(args) if i not in gathered]
            tensors = [t for t in tree_flatten((inputs, kwargs))[0] if isinstance(t, torch.Tensor)] + outputs
            nbytes = sum(t.numel() * t.element_size() for t in tensors)
            if name in COMPUTE_OPS:
                self.compute_bytes += nbytes
                self.compute_kernels += 1
            else:
                self.traffic += nbytes
                self.by_op[name] = self.by_op.get(name, 0) + nbytes
            return out

    return Traffic()


def counted_traffic(model, plan, seq_len: int, raw: dict | None = None):
    """One micro-batch (forward and backward) of ``plan`` on fake tensors under :func:`traffic_mode`: the mode, its
    ``.forward_traffic`` the forward's share (bytes). ``raw``: the config.json dict (default: read from the model's
    id or path)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from advisor.measure.autocast_ops import cuda_autocast_float32
    from advisor.measure.quantized_base import cuda_autocast_answers
    from advisor.measure.simulate import _adapter_skeleton, fake_model
    from advisor.measure.trainable import autocast_dtype, hf_config, synthetic_batch
    from advisor.core.vocabulary import Method

    config = hf_config(model, plan, raw, zero_attention_dropout=True, simulated=True)
    dtype = autocast_dtype(plan.precision)
    mode = traffic_mode()
    skeleton = _adapter_skeleton(model, config, plan) if Method.of(plan.method).spec.adapters else None
    with FakeTensorMode(allow_non_fake_inputs=True), cuda_autocast_answers(True), cuda_autocast_float32(True):
        net = fake_model(model, config, plan, skeleton)
        batch = synthetic_batch(model, config, plan.micro_batch_size, seq_len)
        with mode:
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                loss = net(**batch).loss
            mode.forward_traffic, mode.forward_kernels = mode.traffic, mode.kernels
            loss.backward()
    return mode


def _traffic_cells(model, plan, seq_len: int) -> tuple[str, float, object]:
    """(the former, counted and modelled traffic as markdown cells, modelled / counted, the counting mode)."""
    from advisor.engine.traffic import elementwise_traffic_bytes

    former = former_traffic(model, plan, seq_len)
    mode = counted_traffic(model, plan, seq_len)
    modelled = elementwise_traffic_bytes(model, plan, seq_len)
    cells = f"{former / 1e9:.0f} | {mode.traffic / 1e9:.0f} | {modelled / 1e9:.0f} | {modelled / mode.traffic:.2f}"
    return cells, modelled / mode.traffic, mode


def published_rows(source: str) -> tuple[list[str], list[float], list[float]]:
    """The same comparison for the published runs of ``benchmarks/published/SOURCE.jsonl`` that state tokens/s per
    GPU and are neither compiled nor Liger's (mapped as ``benchmarks/published.py`` maps them): markdown rows, the
    modelled over the counted traffic, and predicted / published tokens/s per GPU. Each GPU runs the whole model on
    its micro-batch, so its elementwise traffic is a one-GPU step's whatever the sharding."""
    rows, traffic_ratios, rate_ratios = [], [], []
    for case in (c for c in published.load_cases() if c["_file"] == source):
        rate = case["measured"].get("tokens_per_s_per_gpu")
        if not rate:
            continue
        try:
            est, profile = published.estimate_case(case, [])
        except published.Skip:
            continue
        plan, seq = est.plan, est.workload.seq_len
        if plan.torch_compile or plan.loss_kernel == LossKernel.LIGER:
            continue
        try:
            cells, ratio, _ = _traffic_cells(profile, plan, seq)
        except Exception as exc:  # noqa: BLE001 - what the simulator cannot run (a mixture of experts' grouped_mm)
            print(
                f"{case['id']}: not counted ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})", file=sys.stderr
            )
            continue
        predicted = est.speed.tokens_per_s / plan.num_gpus
        traffic_ratios.append(ratio)
        rate_ratios.append(predicted / rate)
        rows.append(f"| {case['id']} | {plan.describe()} | {cells} | {predicted:,.0f} | {rate:,.0f} |")
        print(rows[-1], file=sys.stderr)
    return rows, traffic_ratios, rate_ratios


def device_rows(records: Path, lines: list[str]) -> dict[str, list[float]]:
    """Appends to ``lines`` a markdown row per eager trial plan of ``records`` (each distinct plan once,
    :func:`benchmarks.speed_fit.device_trials`; compiled and Liger plans left out: their fused kernels are not eager's,
    nor do they run on fake tensors); returns the modelled over the counted traffic and the predicted over the measured
    step time."""
    from advisor.app import api
    from benchmarks.speed_fit import device_trials

    ratios = {"traffic": [], "step": []}
    for model_id, seq, options, measured_s, described in device_trials(records):
        if options["torch_compile"] or options["loss_kernel"] == LossKernel.LIGER:
            continue
        est = api.estimate(model_id, gpu="h100-sxm", seq_len=seq, **options)
        cells, ratio, mode = _traffic_cells(est.model, est.plan, seq)
        predicted = est.speed.step_time_s
        top = sorted(mode.by_op.items(), key=lambda kv: -kv[1])[:5]
        ratios["traffic"].append(ratio)
        ratios["step"].append(predicted / measured_s)
        lines.append(
            f"| {model_id} | {described} | {cells} | {predicted:.3f} | {measured_s:.3f} | "
            + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in top)
            + " |"
        )
        print(lines[-1], file=sys.stderr)
    return ratios


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f}, range {min(values):.2f}-{max(values):.2f} (n={len(values)})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default=str(ROOT / "benchmarks" / "results" / "validate_h100-sxm.jsonl"))
    parser.add_argument("--out", help="also write the markdown here")
    parser.add_argument(
        "--published",
        nargs="*",
        default=[],
        metavar="SOURCE",
        help="also the runs of benchmarks/published/SOURCE.jsonl (e.g. hf-qlora)",
    )
    args = parser.parse_args(argv)

    import importlib.metadata
    from datetime import date

    versions = ", ".join(
        f"{p} {importlib.metadata.version(p)}" for p in ("torch", "transformers", "peft", "bitsandbytes")
    )
    lines = [
        f"# Eager memory traffic: counted on fake tensors against the traffic model ({date.today()})",
        "",
        f"`benchmarks/eager_traffic.py {' '.join(argv if argv is not None else sys.argv[1:])}` ({versions}; "
        f"records {Path(args.records).name}). Traffic of one micro-batch, forward and backward, in GB: former "
        "(the saved activations × (3 + r), the price before the count), counted at the run's own shape, and "
        "modelled (`advisor.engine.traffic`, fitted on 1-3 layer designs by `benchmarks/calibrate_traffic.py`); "
        "steps in seconds on the H100 the records come from. Compiled and Liger rows are left out (their fused "
        "kernels are not eager's). A sharded plan (FSDP, ZeRO) is counted as the simulator's one-device step over "
        "its fp32 weights under autocast, whose weight casts FSDP's 16-bit gathers do not make: its modelled "
        "traffic (the 16-bit column) is lower than that count by design.",
        "",
    ]
    lines += [
        "| model | plan | former GB | counted GB | modelled GB | modelled / counted | predicted s | measured s | "
        "top ops (GB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = device_rows(Path(args.records), lines)
    if ratios["step"]:
        lines += [
            "",
            f"modelled / counted traffic: {_spread(ratios['traffic'])}",
            "",
            f"step time predicted / measured: {_spread(ratios['step'])}",
        ]
    for source in args.published:
        rows, traffic_r, rate_r = published_rows(source)
        lines += [
            "",
            f"Published runs of `benchmarks/published/{source}.jsonl` (tokens/s per GPU, eager):",
            "",
            "| case | plan | former GB | counted GB | modelled GB | modelled / counted | predicted tokens/s | "
            "published |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
        ]
        if rate_r:
            lines += [
                "",
                f"modelled / counted traffic: {_spread(traffic_r)}",
                "",
                f"tokens/s predicted / published: {_spread(rate_r)}, {sum(map(published.within, rate_r))} of "
                f"{len(rate_r)} within 1.25x",
            ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
