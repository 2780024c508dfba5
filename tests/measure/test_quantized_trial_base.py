"""QLoRA's trial base with random weights (advisor.measure.quantized_base.random_quantized): the model that
``from_pretrained`` with the plan's BitsAndBytesConfig loads from a checkpoint, built a tensor at a time on the
device without a checkpoint on disk. Checked on the CPU, where bitsandbytes (>= 0.49) quantizes too."""

from __future__ import annotations

import json
import math

import pytest
from conftest import cuda_plan  # noqa: E402

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("bitsandbytes")
pytest.importorskip("accelerate")

from advisor.measure.quantized_base import random_quantized  # noqa: E402
from advisor.measure.trainable import (
    _dtype_kwargs,
    apply_adapters,
    build_quantized,  # noqa: E402
    hf_config,
)
from probes.model import profile_model  # noqa: E402
from rules import Plan  # noqa: E402

#: a tied head (Llama-3.2's), grouped-query attention and biases on the attention projections (Qwen2's layout)
LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
    "attention_bias": True,
}


#: GPT-2's Conv1D layers, which transformers' quantizer turns into Linear4bit too (weights transposed)
GPT2 = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_layer": 2,
    "n_embd": 128,
    "n_head": 4,
    "n_positions": 256,
    "vocab_size": 512,
}


def _plan(**kw) -> Plan:
    return cuda_plan(
        **{
            "device": "cpu",
            "tf32": False,
            "method": "qlora",
            "weights_dtype": "bf16",
            "lora_targets": "all-linear",
            "micro_batch_size": 2,
            **kw,
        }
    )


def _layout(net) -> dict:
    """Each parameter's class, dtype, shape and whether it trains, by name (tied ones under each name)."""
    return {
        name: (type(p).__name__, p.dtype, tuple(p.shape), p.requires_grad)
        for name, p in net.named_parameters(remove_duplicate=False)
    }


def _loaded(config, plan: Plan, tmp_path, device: str = "cpu"):
    """The reference: random weights saved and loaded back by from_pretrained with the same quantization."""
    from advisor.measure.quantized_base import quantizer_of

    auto = transformers.AutoModelForCausalLM
    folder = tmp_path / "ckpt"
    auto.from_config(config, **_dtype_kwargs(plan.weights_dtype)).save_pretrained(folder)
    return auto.from_pretrained(
        folder,
        config=config,
        device_map={"": 0 if device == "cuda" else device},
        quantization_config=quantizer_of(plan).quantization_config,
        **_dtype_kwargs(plan.weights_dtype),
    )


@pytest.mark.parametrize(
    "raw, settings", [(LLAMA, {}), (LLAMA, {"double_quant": False}), (LLAMA, {"weights_dtype": "fp32"}), (GPT2, {})]
)
def test_the_random_base_is_what_from_pretrained_loads(tmp_path, raw, settings) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    model, plan = profile_model(str(path)), _plan(**settings)
    config = hf_config(model, plan)
    ours = build_quantized(model, config, plan, torch.device("cpu"))
    theirs = _loaded(config, plan, tmp_path)

    assert _layout(ours) == _layout(theirs)
    assert {n: (b.dtype, tuple(b.shape)) for n, b in ours.named_buffers()} == {
        n: (b.dtype, tuple(b.shape)) for n, b in theirs.named_buffers()
    }
    for (name, a), (_, b) in zip(ours.named_buffers(), theirs.named_buffers()):
        assert torch.equal(a, b), name  # the rotary frequencies are computed, not left empty
    assert len(list(ours.parameters())) == len(list(theirs.parameters()))  # the tied head kept tied: not two
    assert ours.lm_head.weight is ours.get_input_embeddings().weight
    q, r = (next(m.weight for m in net.modules() if type(m).__name__ == "Linear4bit") for net in (ours, theirs))
    assert (q.quant_state.nested, q.quant_state.blocksize, q.quant_state.quant_type, q.quant_state.dtype) == (
        r.quant_state.nested,
        r.quant_state.blocksize,
        r.quant_state.quant_type,
        r.quant_state.dtype,
    )
    assert q.quant_state.absmax.shape == r.quant_state.absmax.shape
    assert (ours.is_loaded_in_4bit, ours.is_quantized) == (True, True)


def test_the_random_base_trains_its_adapters_with_a_finite_loss(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    model, plan = profile_model(str(path)), _plan()
    net = apply_adapters(build_quantized(model, hf_config(model, plan), plan, torch.device("cpu")), model, plan)
    trained = [p for p in net.parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n, p in net.named_parameters() if p.requires_grad)
    ids = torch.randint(0, 512, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = net(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in trained)


def test_random_quantized_stays_on_the_device_it_is_given(tmp_path) -> None:
    config = transformers.LlamaConfig(**{k: v for k, v in LLAMA.items() if k not in ("model_type", "architectures")})
    net = random_quantized(
        transformers.AutoModelForCausalLM, config, _plan(), torch.device("cpu"), _dtype_kwargs("bf16")
    )
    assert {p.device.type for p in net.parameters()} | {b.device.type for b in net.buffers()} == {"cpu"}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_random_base_is_what_from_pretrained_loads_and_holds_no_16bit_model(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4}))
    model, plan = profile_model(str(path)), _plan(device="cuda")
    config = hf_config(model, plan)
    torch.cuda.reset_peak_memory_stats()
    ours = build_quantized(model, config, plan, torch.device("cuda"))
    peak = torch.cuda.max_memory_allocated()
    assert {p.device.type for p in ours.parameters()} == {"cuda"}
    assert _layout(ours) == _layout(_loaded(config, plan, tmp_path, "cuda"))
    largest = 4096 * 1024 * 2  # one bf16 MLP matrix: the most the build holds beside the 4-bit model
    assert peak <= sum(p.numel() * p.element_size() for p in ours.parameters()) + 2 * largest


def test_the_trial_loop_runs_on_the_random_base(tmp_path) -> None:
    """The path a CUDA QLoRA trial takes (build_quantized, PEFT's 4-bit adapters, the optimizer, the steps and the
    memory count), run on the CPU, where bitsandbytes quantizes and trains too: advisor validate refuses QLoRA here
    (rule method.adapters-when-full-does-not-fit), so the trial is called directly."""
    from advisor.measure.trial import run_trial

    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    model = profile_model(str(path))
    outcome = run_trial(model, _plan(), 32, steps=2, warmup=2)
    assert outcome.status == "ok", outcome.message
    assert len(outcome.step_times_s) == 2 and all(math.isfinite(x) for x in outcome.losses)
    assert outcome.peak_bytes > 0
