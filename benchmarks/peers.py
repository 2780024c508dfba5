"""advisor's estimate beside accelerate's ``estimate-memory``, both against a simulated step.

accelerate: its own ``gather_data`` (accelerate/commands/estimate.py), whose CLI prints as "Training
using Adam (Peak vRAM)" the largest of its components (model, gradients, optimizer, step), for
batch size 1 and without activations. Its ``create_empty_model`` asks the Hub first, so it is
replaced by the same construction from the local config (``init_empty_weights()`` + ``AutoModel``);
nothing else of accelerate is changed. DeepSpeed's ``estimate_zero2_model_states_mem_needs_all_live``
is not compared: DeepSpeed is published here as a source distribution only and was not built.

advisor: ``estimate_memory`` (analytic) and its CLI's cold wall time (``advisor estimate --json``).
Reference: the simulated step (``advisor/measure/simulate.py``), peak of live tensors.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/peers.py   (needs ``pip install accelerate``)
Writes benchmarks/results/peers.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.engine.memory import estimate_memory  # noqa: E402
from advisor.measure.simulate import simulate  # noqa: E402
from probes.model import _catalog_dir, profile_model  # noqa: E402
from rules import Plan  # noqa: E402

GIB = 1024**3
#: (model, task, micro-batch, seq, precision, checkpointing, optimizer)
CASES = [
    ("gpt2", None, 4, 512, "fp32", False, "adamw"),
    ("gpt2", None, 4, 512, "bf16", False, "adamw"),
    ("bert-large-uncased", "sequence-classification", 4, 512, "fp16", False, "adamw"),
    ("facebook/opt-1.3b", None, 4, 512, "bf16", True, "adamw"),
    ("meta-llama/Llama-2-7b-hf", None, 1, 2048, "bf16", True, "adafactor"),
]


def accelerate_estimate(model_id: str, precision: str) -> tuple[float, float]:
    """(bytes accelerate's CLI would print for training with Adam, seconds)."""
    import accelerate.commands.estimate as est
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModel

    config_dict = json.loads(_catalog_dir().joinpath(model_id.replace("/", "--") + ".json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(config_dict))

        def create_empty_model(model_name, library_name, trust_remote_code=False, access_token=None):
            config = AutoConfig.from_pretrained(model_name)
            with init_empty_weights():
                return AutoModel.from_config(config)

        est.create_empty_model = create_empty_model
        dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[precision]
        start = time.perf_counter()
        data = est.gather_data(
            SimpleNamespace(model_name=tmp, library_name="transformers", trust_remote_code=False, dtypes=[dtype])
        )
        seconds = time.perf_counter() - start
    return float(max(data[0][3].values())), seconds


def advisor_cli_seconds(
    model_id: str, task: str | None, micro: int, seq: int, precision: str, ckpt: bool, optimizer: str
) -> float:
    cmd = (
        [
            sys.executable,
            "-m",
            "advisor",
            "estimate",
            "--model",
            model_id,
            "--gpu",
            "a100-80gb",
            "--micro-batch-size",
            str(micro),
            "--seq-len",
            str(seq),
            "--precision",
            precision,
            "--optimizer",
            optimizer,
            "--json",
        ]
        + (["--task", task] if task else [])
        + (["--gradient-checkpointing"] if ckpt else [])
    )
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - start


def main() -> None:
    lines = [
        f"# advisor vs accelerate estimate-memory, against a simulated step ({date.today()})",
        "",
        "| configuration | simulated GiB | advisor GiB (error) | accelerate GiB (error) | advisor CLI s | "
        "accelerate s (in-process, no Hub) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for model_id, task, micro, seq, precision, ckpt, optimizer in CASES:
        profile = profile_model(model_id, task)
        plan = Plan(
            device="cuda",
            precision=precision,
            tf32=False,
            optimizer=optimizer,
            gradient_checkpointing=ckpt,
            micro_batch_size=micro,
            gradient_accumulation_steps=1,
            parallelism="none",
            num_gpus=1,
        )
        sim = simulate(profile, plan, seq).peak_bytes
        ours = estimate_memory(profile, plan, seq, 80 * GIB).peak_bytes
        theirs, their_s = accelerate_estimate(model_id, precision)
        cli_s = advisor_cli_seconds(model_id, task, micro, seq, precision, ckpt, optimizer)
        name = f"{model_id} {task or profile.task} {micro}x{seq} {precision}{' ckpt' if ckpt else ''} {optimizer}"
        lines.append(
            f"| {name} | {sim / GIB:.2f} | {ours / GIB:.2f} ({ours / sim - 1:+.1%}) | "
            f"{theirs / GIB:.2f} ({theirs / sim - 1:+.1%}) | {cli_s:.2f} | {their_s:.2f} |"
        )
        print(lines[-1], flush=True)
    lines += ["", "accelerate's figure is for Adam whatever the optimizer, at batch size 1, without activations."]
    (ROOT / "benchmarks" / "results" / "peers.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
