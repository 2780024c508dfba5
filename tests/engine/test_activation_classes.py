"""Which tensors a step keeps depends on the class of step, not only on the precision: the residual stream's dtype
(fp32 weights under autocast, or 16-bit weights, which is also ZeRO's and FSDP's compute), frozen layers (LoRA keeps
no input for a frozen weight; QLoRA's bitsandbytes layers did before 0.43.2) and tensor parallelism with sequence
parallelism.
Each class has its own calibrated column (``advisor/engine/calibration.py:calibration_keys``)."""

from __future__ import annotations

import pytest

from advisor.engine.memory import _calibration, calibration_keys, estimate_memory
from probes.model import profile_model
from rules import Plan
from conftest import cuda_plan  # noqa: E402

LLAMA = "meta-llama/Llama-2-7b-hf"
GIB = 2**30


def _plan(**kw) -> Plan:
    return cuda_plan(**{"micro_batch_size": 2, **kw})


def _activations(model: str = LLAMA, seq: int = 1024, **kw) -> int:
    return estimate_memory(profile_model(model), _plan(**kw), seq, 80 * GIB).components.activations_bytes


def test_each_class_names_its_column_most_specific_first() -> None:
    assert calibration_keys(_plan(precision="fp32")) == ["fp32"]
    assert calibration_keys(_plan()) == ["mixed"]
    assert calibration_keys(_plan(weights_dtype="bf16")) == ["bf16", "mixed"]
    assert calibration_keys(_plan(weights_dtype="bf16", method="lora", lora_targets="attention")) == [
        "bf16+lora-attention",
        "bf16",
        "mixed",
    ]
    # ZeRO and FSDP compute with 16-bit parameters: the 16-bit column even over fp32 weights
    assert calibration_keys(_plan(parallelism="zero-2", num_gpus=8))[0] == "bf16"
    assert calibration_keys(_plan(parallelism="fsdp-full-shard", num_gpus=8))[0] == "bf16"
    # QLoRA's own columns, then LoRA's (bitsandbytes >= 0.43.2 keeps no 4-bit layer's input, as a frozen layer);
    # on an older bitsandbytes its own, then full fine-tuning's (every linear layer's input kept)
    assert calibration_keys(_plan(weights_dtype="bf16", method="qlora", lora_targets="attention")) == [
        "bf16+qlora-attention",
        "bf16+lora-attention",
        "bf16",
        "mixed",
    ]
    assert calibration_keys(
        _plan(weights_dtype="bf16", method="qlora", lora_targets="all-linear", legacy_bitsandbytes=True)
    ) == ["bf16+qlora-all-linear+keeps-inputs", "bf16", "mixed"]


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gemma", "phi3", "gpt2"])
def test_the_decoder_families_have_every_column(family) -> None:
    table = _calibration()[family]["causal-lm"]
    assert {"fp32", "mixed", "bf16", "bf16+lora-all-linear"} <= set(table)


def test_a_16_bit_residual_stream_keeps_less_than_autocasts_fp32_one() -> None:
    mixed, pure = _activations(), _activations(weights_dtype="bf16")
    assert pure < 0.8 * mixed
    # the same class under ZeRO-2 over fp32 weights
    assert _activations(parallelism="zero-2", num_gpus=8) == pure


def test_frozen_layers_keep_no_inputs_nor_do_current_4_bit_layers() -> None:
    """A frozen 16-bit layer keeps no input; neither does bitsandbytes' 4-bit layer since 0.43.2, and PEFT's 4-bit LoRA
    layer does not cast its input to the fp32 adapters under autocast: QLoRA keeps less than LoRA. bitsandbytes
    before 0.43.2 kept every 4-bit layer's input: more than LoRA, and under checkpointing too."""
    full = _activations(weights_dtype="bf16")
    lora = _activations(weights_dtype="bf16", method="lora", lora_targets="attention")
    qlora = _activations(weights_dtype="bf16", method="qlora", lora_targets="attention")
    legacy = _activations(weights_dtype="bf16", method="qlora", lora_targets="attention", legacy_bitsandbytes=True)
    assert qlora < lora < full  # the MLP's down projection keeps no input
    assert lora < legacy  # the down projection's input (2 B x ffn per token) is back
    all_linear = _activations(weights_dtype="bf16", method="lora", lora_targets="all-linear")
    assert lora < all_linear
    ckpt = dict(weights_dtype="bf16", method="qlora", lora_targets="all-linear", gradient_checkpointing=True)
    assert _activations(**ckpt, legacy_bitsandbytes=True) > 2 * _activations(**ckpt)


def test_query_value_adapters_keep_what_their_simulated_step_keeps() -> None:
    """q and v adapters (PEFT's default) have their own columns: under LoRA the k and o adapters' inputs go (PEFT casts
    each adapter's input to the fp32 adapter: 4 B x h a token per layer on the simulated Llama step); QLoRA's 4-bit
    layer casts nothing, so its q-v step keeps what its q, k, v, o step keeps. A model type without q-v columns falls
    back to the q, k, v, o ones."""
    table = _calibration()["llama"]["causal-lm"]
    assert table["bf16+lora-attention"]["layer_h"] - table["bf16+lora-q-v"]["layer_h"] == pytest.approx(4, abs=0.1)
    assert table["bf16+qlora-q-v"]["layer_h"] == pytest.approx(table["bf16+qlora-attention"]["layer_h"], abs=0.1)
    assert calibration_keys(_plan(weights_dtype="bf16", method="qlora", lora_targets="q-v")) == [
        "bf16+qlora-q-v",
        "bf16+qlora-attention",
        "bf16+lora-q-v",
        "bf16+lora-attention",
        "bf16",
        "mixed",
    ]
    qv, attention = (_activations(weights_dtype="bf16", method="lora", lora_targets=t) for t in ("q-v", "attention"))
    assert attention - qv == pytest.approx(4 * 4096 * 2 * 1024 * 32, rel=0.03)  # 4 B x h x tokens x layers


def test_tensor_parallel_with_sequence_parallelism_splits_every_activation() -> None:
    one = _activations(weights_dtype="bf16")
    assert _activations(weights_dtype="bf16", tensor_parallel=8, num_gpus=8) == pytest.approx(one / 8, rel=1e-6)


def test_a_litgpt_plan_reads_litgpts_columns_first() -> None:
    """LitGPT's own step keeps other tensors than transformers' model + PEFT: its columns (fitted to simulated LitGPT
    steps, benchmarks/calibrate_litgpt.py) come first, the transformers model's after them."""
    keys = calibration_keys(_plan(weights_dtype="bf16", method="lora", lora_targets="attention", framework="litgpt"))
    assert keys[:2] == ["litgpt:bf16+lora-attention", "litgpt:bf16"] and keys[-3:] == [
        "bf16+lora-attention",
        "bf16",
        "mixed",
    ]
    assert "litgpt:bf16+lora-attention" in _calibration()["llama"]["causal-lm"]
    hf = _activations(weights_dtype="bf16", method="lora", lora_targets="attention")
    assert _activations(weights_dtype="bf16", method="lora", lora_targets="attention", framework="litgpt") != hf


def test_cli_estimate_takes_the_framework_and_says_it() -> None:
    import json

    from cli_runner import advisor

    args = ("estimate", "--model", LLAMA, "--gpu", "a10g", "--method", "lora", "--seq-len", "512", "--json")
    hf, lit = (json.loads(advisor(*args, *extra).stdout) for extra in ((), ("--framework", "litgpt")))
    assert (hf["plan"]["framework"], lit["plan"]["framework"]) == ("transformers", "litgpt")
    assert lit["memory"]["components"]["activations_bytes"] != hf["memory"]["components"]["activations_bytes"]
    text = advisor(*args[:-1], "--framework", "litgpt")
    assert text.returncode == 0 and "litgpt's code" in text.stdout.splitlines()[0]
    # Megatron-style fused layers keep less than the Hugging Face model (no fp32 norm copies, a fused SwiGLU)
    megatron = json.loads(advisor(*args, "--framework", "megatron").stdout)
    assert megatron["plan"]["framework"] == "megatron"
    assert megatron["memory"]["components"]["activations_bytes"] < hf["memory"]["components"]["activations_bytes"]


def test_litgpt_builds_its_lm_head_apart_from_the_embedding() -> None:
    """LitGPT's GPT has ``lm_head`` and ``wte`` apart: a model that ties them (gpt2) gets a second vocabulary × hidden
    matrix under ``--framework litgpt``; an untied one (Llama-2) is unchanged."""
    from advisor.app.api import estimate

    gpt2 = profile_model("gpt2")
    assert gpt2.tied_embeddings and not gpt2.untied().tied_embeddings
    assert gpt2.untied().num_parameters == gpt2.num_parameters + gpt2.vocab_size * gpt2.hidden_size
    assert profile_model(LLAMA).untied() == profile_model(LLAMA)
    hf, lit = (
        estimate("gpt2", gpu="a100-80gb", seq_len=128, micro_batch_size=1, framework=f)
        for f in ("transformers", "litgpt")
    )
    assert lit.model.num_parameters == gpt2.untied().num_parameters
    assert lit.memory.components.weights_bytes > hf.memory.components.weights_bytes


@pytest.mark.parametrize("model", [LLAMA, "mistralai/Mistral-7B-v0.1", "Qwen/Qwen2.5-7B"])
@pytest.mark.parametrize(
    "step",
    [
        dict(weights_dtype="bf16"),
        dict(weights_dtype="bf16", method="lora", lora_targets="attention"),
        dict(weights_dtype="bf16", method="lora", lora_targets="all-linear"),
        dict(weights_dtype="bf16", parallelism="fsdp-full-shard", num_gpus=2),
    ],
)
@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_structural_formula_prices_16_bit_classes_as_the_simulated_steps(
    monkeypatch, model, step, checkpointing
) -> None:
    """The structural formula (families without a calibration: mixtures of experts, new architectures) keeps a
    16-bit residual stream over 16-bit weights, drops frozen layers' inputs and recomputes a checkpointed block apart
    from the logits: on the gated families whose columns are fitted to simulated steps it lands within 10 % of them
    for 16-bit weights, ZeRO / FSDP and LoRA, checkpointed or not."""
    import advisor.engine.memory as memory

    kw = dict(step, gradient_checkpointing=checkpointing, micro_batch_size=4)
    calibrated = _activations(model, **kw)
    monkeypatch.setattr(memory, "_calibration", lambda: {})
    structural = _activations(model, **kw)
    assert abs(structural / calibrated - 1) <= 0.10


def test_a_megatron_gpt_block_keeps_korthikantis_34_sbh_and_5_as2b() -> None:
    """Korthikanti et al. 2022 sec. 4.1 (https://arxiv.org/abs/2205.05198): a GPT block in 16 bits with dropout keeps
    sbh(34 + 5as/h) bytes; under FlashAttention (no s × s tensors) 34sbh. ``--framework megatron`` prices that."""
    from advisor.engine.structural import layer_activation_bytes

    gpt = profile_model("gpt2-medium")  # GPT-2 / GPT-3 shaped: LayerNorm, 4h GeLU MLP, dropout, multi-head
    assert gpt.dropout and not gpt.gated_mlp and gpt.ffn_size == 4 * gpt.hidden_size
    plan = _plan(weights_dtype="bf16", framework="megatron", micro_batch_size=4)
    s, b, h, a = 1024, 4, gpt.hidden_size, gpt.num_attention_heads
    sbh = s * b * h
    assert layer_activation_bytes(gpt, plan, s) == 34 * sbh
    assert layer_activation_bytes(gpt, plan, s, eager_attention=True) == 34 * sbh + 5 * a * s * s * b
    # the Hugging Face model's unfused block keeps more: the softmax in fp32 under autocast, for one
    hf = layer_activation_bytes(gpt, _plan(weights_dtype="bf16", micro_batch_size=4), s, eager_attention=True)
    assert hf > 34 * sbh + 5 * a * s * s * b


def test_a_megatron_llama_block_keeps_no_fp32_norm_copy_nor_the_swiglu_output() -> None:
    """Megatron-Core's fused norms keep their input only and its fused SwiGLU its input (recomputing silu): per block
    two fp32 normalised copies (4 B each) and one s·b·ffn activation output less than the Hugging Face Llama."""
    from advisor.engine.structural import layer_activation_bytes

    llama = profile_model(LLAMA)
    s, b = 2048, 1
    hf = layer_activation_bytes(llama, _plan(weights_dtype="bf16", micro_batch_size=b), s)
    megatron = layer_activation_bytes(llama, _plan(weights_dtype="bf16", micro_batch_size=b, framework="megatron"), s)
    assert hf - megatron == 2 * 4 * s * b * llama.hidden_size + 2 * s * b * llama.ffn_size
    assert calibration_keys(_plan(framework="megatron")) == []  # no fitted column: the formula prices it


@pytest.mark.parametrize("parallelism, gpus, per_param", [("zero-1", 8, 6 + 12 / 8), ("none", 1, 18)])
def test_megatrons_optimizer_keeps_fp32_gradients_beside_16_bit_parameters(parallelism, gpus, per_param) -> None:
    """Megatron Core user guide, "Distributed Optimizer" (bytes per parameter, float16 param + fp32 grads): 6 + 12/d
    with the distributed optimizer, 18 without."""
    model = profile_model(LLAMA)
    plan = _plan(weights_dtype="bf16", framework="megatron", parallelism=parallelism, num_gpus=gpus)
    c = estimate_memory(model, plan, 1024, 80 * GIB).components
    states = c.weights_bytes + c.gradients_bytes + c.optimizer_states_bytes
    assert states == pytest.approx(per_param * model.num_parameters, rel=1e-6)
