"""The memory traffic of an eager training step, counted op by op on fake tensors, against what the speed model
prices (issue 13, item 4: why the H100 trials ran slower than predicted).

Usage: python benchmarks/eager_traffic.py [--records benchmarks/results/validate_h100-sxm.jsonl] [--out FILE]

The speed model (:mod:`advisor.engine.speed`) prices a micro-batch's memory-bound work as the activations its forward
produces, read and written about (3 + r) times (:func:`advisor.engine.memory.activation_traffic_bytes`), at
:data:`advisor.engine.speed.BANDWIDTH_SHARE` of the GPU's bandwidth. Here each record's plan runs one micro-batch through the simulator's model (the same transformers
model, PEFT adapters and autocast as a trial; fake tensors, so nothing is computed) under a ``TorchDispatchMode`` that
adds, per aten op, the bytes of its tensor inputs and outputs: matmuls (``mm``, ``addmm``, ``bmm``...) and the fused
attention kernels apart, views and metadata ops as nothing, every other op (casts, norms, activations, dropout,
rotary, residual adds, the loss, LoRA's scaling and sums) as memory traffic. It prints, per trial, the priced and the
counted traffic of one micro-batch, and the step time the speed model gives with the counted traffic in place of
the priced one, beside the measured step. Eager steps only: a compiled plan's fused kernels are not what eager runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import published  # noqa: E402
from benchmarks.device_records import read_records  # noqa: E402
from probes.kernels import LossKernel  # noqa: E402
from probes.vocabulary import Method  # noqa: E402

#: aten ops priced as matmuls or attention kernels (compute, not traffic)
COMPUTE_OPS = ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_scaled_dot_product_flash_attention",
               "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
               "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_backward",
               "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
               "_scaled_dot_product_flash_attention_for_cpu_backward")


#: aten ops that launch no memory-bound kernel besides the views (``func.is_view``): allocations, metadata, and
#: ``_unsafe_view`` (a reshape without a view's aliasing annotation)
NO_KERNEL_OPS = ("detach", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "alias",
                 "lift_fresh", "_local_scalar_dense", "set_", "resize_", "_unsafe_view", "view", "t")


def priced_traffic(model, plan, seq_len: int) -> float:
    """The memory traffic of one micro-batch as :mod:`advisor.engine.speed` prices it, bytes: the activations the
    forward produces, written and read back (3 + r) times (r: checkpointing's recomputed share)."""
    from advisor.engine.checkpointing import recompute_shares
    from advisor.engine.memory import activation_traffic_bytes

    return activation_traffic_bytes(model, plan, seq_len) * (3.0 + recompute_shares(model, plan)[0])


def bandwidth_bytes_per_s(gpu_id: str) -> float:
    """The catalog GPU's memory bandwidth at the share the speed model takes (:data:`BANDWIDTH_SHARE`), bytes/s."""
    from advisor.engine.speed import BANDWIDTH_SHARE
    from probes.gpu_catalog import catalog

    return catalog()[gpu_id].memory_bandwidth_gbps * 1e9 * BANDWIDTH_SHARE


def traffic_mode():
    """A ``TorchDispatchMode`` adding each op's input and output bytes to ``.traffic`` (views and metadata ops:
    nothing; :data:`COMPUTE_OPS`: to ``.compute_bytes``), per op name in ``.by_op``."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Traffic(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.traffic = 0
            self.compute_bytes = 0
            self.by_op: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if func.is_view or name in NO_KERNEL_OPS:
                return out
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if not outputs:  # a metadata query (device, size, is_contiguous...): no kernel
                return out
            tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)] + outputs
            nbytes = sum(t.numel() * t.element_size() for t in tensors)
            if name in COMPUTE_OPS:
                self.compute_bytes += nbytes
            else:
                self.traffic += nbytes
                self.by_op[name] = self.by_op.get(name, 0) + nbytes
            return out

    return Traffic()


def counted_traffic(model, plan, seq_len: int, raw: dict | None = None):
    """One micro-batch (forward and backward) of ``plan`` on fake tensors under :func:`traffic_mode`: the mode.
    ``raw``: the config.json dict (default: read from the model's id or path)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from advisor.measure.autocast_ops import cuda_autocast_float32
    from advisor.measure.quantized_base import cuda_autocast_answers
    from advisor.measure.simulate import _adapter_skeleton, fake_model
    from advisor.measure.trainable import autocast_dtype, hf_config, synthetic_batch
    from probes.vocabulary import Method

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
            loss.backward()
    return mode


#: The fit's design (``--fit``): (layers, FFN multiple of the model's, extra vocabulary rows, micro-batch, seq-len)
FIT_DESIGN = [(1, 1, 0, 2, 256), (2, 1, 0, 2, 256), (3, 1, 0, 2, 256), (2, 2, 0, 2, 256), (2, 1, 4096, 2, 256),
              (2, 1, 0, 4, 256), (2, 1, 0, 2, 512), (3, 2, 4096, 1, 512), (1, 1, 0, 1, 128), (3, 1, 0, 4, 512),
              (1, 2, 0, 4, 128), (3, 1, 4096, 2, 128), (2, 2, 0, 1, 1024), (1, 1, 4096, 4, 1024)]


def fit_traffic(model_id: str, plan_options: dict, seq_len: int, micro_batch: int) -> dict:
    """Whether an eager step's counted traffic is linear in the shapes the activation columns use, so that it can be
    calibrated as they are: fits traffic = L·(a·sbh + b·sbf + e) + c·sbv + d·sbh + g (e, g: the weights' casts and
    other per-layer and per-step constants) over :data:`FIT_DESIGN` (the model at
    its own width, few layers), then predicts the model's own shape at ``seq_len`` × ``micro_batch`` and counts it.
    Returns ``plan``, ``coef`` (a, b, c, d in bytes per element; e, g in bytes), ``worst`` (the design's worst
    relative residual), ``predicted`` and ``counted`` (bytes)."""
    import numpy as np

    from advisor.app import api
    from probes.model import load_config, profile_from_config

    raw0 = dict(load_config(model_id)[0])
    full = api.estimate(model_id, gpu="h100-sxm", seq_len=seq_len, micro_batch_size=micro_batch,
                        global_batch_size=micro_batch, torch_compile=False, **plan_options)
    layers_key, ffn_key = "num_hidden_layers", "intermediate_size"

    def row(layers: int, ffn_mult: int, extra_v: int, b: int, s: int) -> tuple[list[float], float]:
        raw = {**raw0, layers_key: layers, ffn_key: raw0[ffn_key] * ffn_mult, "vocab_size": raw0["vocab_size"] + extra_v}
        prof = profile_from_config(raw, model_id)
        plan = full.plan.model_copy(update={"micro_batch_size": b})
        sb = s * b
        features = [layers * sb * prof.hidden_size, layers * sb * prof.ffn_size, sb * prof.vocab_size,
                    sb * prof.hidden_size, layers, 1.0]
        return features, counted_traffic(prof, plan, s, raw).traffic

    rows = [row(*design) for design in FIT_DESIGN]
    a, y = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    worst = float(np.max(np.abs(a @ coef - y) / y))
    m, sb = full.model, seq_len * micro_batch
    predicted = float(coef @ [m.num_layers * sb * m.hidden_size, m.num_layers * sb * m.ffn_size, sb * m.vocab_size,
                              sb * m.hidden_size, m.num_layers, 1.0])
    return {"plan": full.plan, "coef": [float(c) for c in coef], "worst": worst, "predicted": predicted,
            "counted": counted_traffic(m, full.plan, seq_len).traffic, "layers": m.num_layers}


def fit_line(model_id: str, fit: dict, seq_len: int, micro_batch: int) -> str:
    """:func:`fit_traffic`'s result as a markdown line."""
    a, b, c, d, e, g = fit["coef"]
    return (f"- {model_id}, {fit['plan'].describe()}: bytes per element a (L·sbh) {a:.1f}, b (L·sbf) {b:.1f}, "
            f"c (sbv) {c:.1f}, d (sbh) {d:.1f}, per layer {e / 1e6:.1f} MB, constant {g / 1e6:.1f} MB; worst "
            f"residual over the {len(FIT_DESIGN)}-row design {fit['worst']:.2%}; at {micro_batch} × {seq_len} and "
            f"its {fit['layers']} layers predicted {fit['predicted'] / 1e9:.1f} GB, counted "
            f"{fit['counted'] / 1e9:.1f} GB ({fit['predicted'] / fit['counted'] - 1:+.2%})")


def published_rows(source: str) -> tuple[list[str], list[float], list[float]]:
    """The same comparison for the published runs of ``benchmarks/published/SOURCE.jsonl`` that state tokens/s per
    GPU and are not compiled (mapped as ``benchmarks/published.py`` maps them): markdown rows, and predicted /
    published with the priced and with the counted traffic. Each GPU runs the whole model on its micro-batch, so
    its elementwise traffic is a one-GPU step's whatever the sharding."""
    rows, priced_ratios, counted_ratios = [], [], []
    for case in (c for c in published.load_cases() if c["_file"] == source):
        rate = case["measured"].get("tokens_per_s_per_gpu")
        if not rate:
            continue
        try:
            est, profile = published.estimate_case(case, [])
        except published.Skip:
            continue
        plan, seq = est.plan, est.workload.seq_len
        if plan.torch_compile:
            continue
        priced = priced_traffic(profile, plan, seq)
        try:
            counted = counted_traffic(profile, plan, seq).traffic
        except Exception as exc:  # noqa: BLE001 - what the simulator cannot run (a mixture of experts' grouped_mm)
            print(f"{case['id']}: not counted ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})",
                  file=sys.stderr)
            continue
        bandwidth = bandwidth_bytes_per_s(published.hardware_options(case, [])["gpu"].split(":")[0])
        extra = (counted - priced) / bandwidth * plan.gradient_accumulation_steps
        step = est.speed.step_time_s
        predicted = est.speed.tokens_per_s / plan.num_gpus
        priced_ratios.append(predicted / rate)
        counted_ratios.append(predicted * step / (step + extra) / rate)
        rows.append(f"| {case['id']} | {plan.describe()} | {priced / 1e9:.0f} | {counted / 1e9:.0f} | "
                    f"{counted / priced:.2f} | {predicted:,.0f} | {predicted * step / (step + extra):,.0f} | "
                    f"{rate:,.0f} |")
        print(rows[-1], file=sys.stderr)
    return rows, priced_ratios, counted_ratios


def device_rows(reports, lines: list[str]) -> dict[str, list[float]]:
    """Appends to ``lines`` a markdown row per eager trial plan of ``reports`` (each once; compiled and Liger plans
    left out: their fused kernels are not eager's, nor do they run on fake tensors); returns predicted / measured
    step time with the priced and with the counted traffic."""
    from advisor.app import api

    seen, ratios = set(), {"priced": [], "counted": []}
    for _, report in reports:
        for trial in report.trials:
            plan, measured = trial.plan, trial.measured
            if plan.torch_compile or plan.loss_kernel == LossKernel.LIGER or not (measured and measured.step_time_s):
                continue
            key = (report.model, plan.describe(), report.workload.seq_len)
            if key in seen:
                continue
            seen.add(key)
            seq = report.workload.seq_len
            fields = {"method", "precision", "weights_dtype", "micro_batch_size", "gradient_accumulation_steps",
                      "gradient_checkpointing", "attention", "loss_kernel", "activation_offloading", "optimizer"}
            fields |= {"lora_rank", "lora_targets"} if Method.of(plan.method).spec.adapters else set()
            est = api.estimate(report.model, gpu="h100-sxm", seq_len=seq, **plan.model_dump(include=fields),
                               global_batch_size=plan.micro_batch_size * plan.gradient_accumulation_steps,
                               torch_compile=False)
            model = est.model
            priced = priced_traffic(model, est.plan, seq)
            mode = counted_traffic(model, est.plan, seq)
            extra = (mode.traffic - priced) / bandwidth_bytes_per_s("h100-sxm") * plan.gradient_accumulation_steps
            predicted = est.speed.step_time_s
            top = sorted(mode.by_op.items(), key=lambda kv: -kv[1])[:5]
            ratios["priced"].append(predicted / measured.step_time_s)
            ratios["counted"].append((predicted + extra) / measured.step_time_s)
            lines.append(f"| {report.model} | {plan.describe()} | {priced / 1e9:.1f} | {mode.traffic / 1e9:.1f} | "
                         f"{mode.traffic / priced:.2f} | {predicted:.3f} | {predicted + extra:.3f} | "
                         f"{measured.step_time_s:.3f} | " + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in top) + " |")
            print(lines[-1], file=sys.stderr)
    return ratios


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default=str(ROOT / "benchmarks" / "results" / "validate_h100-sxm.jsonl"))
    parser.add_argument("--out", help="also write the markdown here")
    parser.add_argument("--fit", action="store_true", help="also fit the traffic's linear form for Llama-3.1-8B "
                        "(full bf16 and LoRA) and check it at the model's own shape (fit_traffic)")
    parser.add_argument("--published", nargs="*", default=[], metavar="SOURCE",
                        help="also the runs of benchmarks/published/SOURCE.jsonl (e.g. hf-qlora)")
    args = parser.parse_args(argv)

    import importlib.metadata
    from datetime import date

    _, reports = read_records([Path(args.records)])
    versions = ", ".join(f"{p} {importlib.metadata.version(p)}" for p in ("torch", "transformers", "peft", "bitsandbytes"))
    lines = [f"# Eager memory traffic: counted on fake tensors against the speed model's ({date.today()})", "",
             f"`benchmarks/eager_traffic.py {' '.join(argv if argv is not None else sys.argv[1:])}` ({versions}; "
             f"records {Path(args.records).name}). Traffic of one micro-batch, forward and backward; steps in seconds "
             "on the H100 the records come from; its datasheet bandwidth at the share the speed model takes. "
             "Compiled and Liger rows are left out (their fused kernels are not eager's).", ""]
    lines += ["| model | plan | priced GB | counted GB | counted / priced | predicted s | with counted s | "
              "measured s | top ops (GB) |", "|---|---|---|---|---|---|---|---|---|"]
    ratios = device_rows(reports, lines)
    for label, values in ratios.items():
        if values:
            lines.append(f"\npredicted / measured with the {label} traffic: median {statistics.median(values):.2f}, "
                         f"range {min(values):.2f}-{max(values):.2f} (n={len(values)})")
    if args.fit:
        lines += ["", "Linear in the activation columns' shapes (the model's width, 1-3 layers; `--fit`):", ""]
        for options in ({"method": "lora", "precision": "bf16", "weights_dtype": "bf16", "attention": "sdpa"},
                        {"method": "full", "precision": "bf16", "weights_dtype": "bf16", "attention": "sdpa"}):
            lines.append(fit_line("meta-llama/Llama-3.1-8B", fit_traffic("meta-llama/Llama-3.1-8B", options, 2048, 2),
                                  2048, 2))
            print(lines[-1], file=sys.stderr)
    for source in args.published:
        rows, priced_r, counted_r = published_rows(source)
        lines += ["", f"Published runs of `benchmarks/published/{source}.jsonl` (tokens/s per GPU, eager):", "",
                  "| case | plan | priced GB | counted GB | counted / priced | predicted tokens/s | with counted | "
                  "published |", "|---|---|---|---|---|---|---|---|", *rows]
        for label, values in (("priced", priced_r), ("counted", counted_r)):
            if values:
                lines.append(f"\npredicted / published with the {label} traffic: median "
                             f"{statistics.median(values):.2f}, range {min(values):.2f}-{max(values):.2f}, "
                             f"{sum(map(published.within, values))} of {len(values)} within 1.25x")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
