"""Issue 12's last two items: expert parallelism for a mixture of experts, and the optimizer step fused into
backward, as the memory and speed models price them and as ``recommend`` / ``estimate`` / ``--emit`` show them."""

from __future__ import annotations

import pytest

from advisor.app.api import estimate, recommend
from advisor.app.emit import render
from advisor.engine.communication import all_to_all_seconds
from advisor.engine.states import local_parameters, model_states
from advisor.core.errors import UsageError
from probes.model import profile_model
from rules import Plan
from conftest import cuda_plan  # noqa: E402

MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
LLAMA2 = "meta-llama/Llama-2-7b-hf"


def _plan(**overrides) -> Plan:
    return cuda_plan(**{"parallelism": "fsdp-shard-grad-op", "num_gpus": 8, "weights_dtype": "bf16", **overrides})


def test_mixtral_routed_experts_are_8_x_32_blocks_of_three_matrices() -> None:
    model = profile_model(MIXTRAL)
    assert model.routed_parameters == 32 * 8 * 3 * 4096 * 14336


def test_expert_parallel_divides_the_routed_experts_and_nothing_else() -> None:
    model = profile_model(MIXTRAL)
    routed = model.routed_parameters
    assert local_parameters(model, _plan()) == model.num_parameters
    assert local_parameters(model, _plan(expert_parallel=8)) == model.num_parameters - routed + routed // 8
    # ZeRO-2 / SHARD_GRAD_OP: the 16-bit weights are whole on each GPU, so they shrink with the experts' split;
    # the sharded gradients and states were 1/n of everything already
    without, with_ep = model_states(model, _plan(), 1), model_states(model, _plan(expert_parallel=8), 1)
    assert with_ep.weights == 2 * local_parameters(model, _plan(expert_parallel=8))
    assert with_ep.weights < without.weights / 4
    assert with_ep.optimizer == without.optimizer and with_ep.grads == without.grads


def test_all_to_all_is_four_exchanges_per_moe_block_or_six_with_checkpointing() -> None:
    model = profile_model(MIXTRAL)
    gpu = __import__("conftest").hardware("a100-80gb:8").gpu
    seconds = all_to_all_seconds(model, _plan(expert_parallel=8), 1024, gpu, nvlink=True, nodes=1)
    # 4 x 32 blocks x 7/8 of b·s·k·h bf16 elements over NVLink at 300 GB/s one way
    assert seconds == pytest.approx(4 * 32 * 7 / 8 * 1024 * 2 * 4096 * 2 / 300e9)
    ckpt = all_to_all_seconds(model, _plan(expert_parallel=8, gradient_checkpointing=True), 1024, gpu, True, 1)
    assert ckpt == pytest.approx(seconds * 1.5)
    assert all_to_all_seconds(model, _plan(), 1024, gpu, True, 1) == 0.0


def test_an_expert_parallel_group_across_nodes_sends_each_gpus_remote_share_over_the_nodes_network() -> None:
    """EP 16 over two 8-GPU nodes: each GPU sends half its tokens to the other node (8 of 16 ranks), and the node's
    8 GPUs share its 8 x 200 Gb/s: 8 x 1/2 of a GPU's bytes over 200 GB/s, not 15/16 of one GPU's (a ring's price)."""
    model = profile_model(MIXTRAL)
    gpu = __import__("conftest").hardware("a100-80gb:8").gpu
    plan = _plan(expert_parallel=16, num_gpus=16)
    sent = 4 * 32 * 1024 * 2 * 4096 * 2  # bytes of one GPU's routed tokens per micro-batch
    node = 8 * 200e9 / 8
    seconds = all_to_all_seconds(model, plan, 1024, gpu, nvlink=True, nodes=2, inter_node_bytes_per_s=node)
    assert seconds == pytest.approx(8 * sent * 8 / 16 / node)
    assert seconds > 4 * sent * 15 / 16 / node  # the former ring-like price
    # a faster network leaves NVLink's share, 7/16 of the bytes at 300 GB/s, the longer one
    fast = all_to_all_seconds(model, plan, 1024, gpu, nvlink=True, nodes=2, inter_node_bytes_per_s=1e15)
    assert fast == pytest.approx(sent * 7 / 16 / 300e9)


@pytest.mark.slow
def test_mixtral_on_8_a100s_weighs_expert_parallelism_with_figures() -> None:
    rec = recommend(MIXTRAL, gpu="a100-80gb:8", method="full")
    decision = rec.settings["expert_parallel"]
    assert decision.value == 1 and [a.value for a in decision.alternatives] == [2, 4, 8]
    figures = [a.reason for a in decision.alternatives if "tokens/s" in a.reason and "GiB" in a.reason]
    assert figures, [a.reason for a in decision.alternatives]
    assert any("Megatron" in a.reason or "DeepSpeed-MoE" in a.reason for a in decision.alternatives)


def test_expert_parallel_is_faster_than_gathering_every_expert_every_layer() -> None:
    """Mixtral on 8 A100s in pure bf16: SHARD_GRAD_OP with the experts split 8 ways fits and beats FULL_SHARD,
    which all-gathers every expert's weights for every micro-batch."""
    common = dict(
        gpu="a100-80gb:8", seq_len=1024, micro_batch_size=1, gradient_accumulation_steps=8, weights_dtype="bf16"
    )
    sharded = estimate(MIXTRAL, parallelism="fsdp-full-shard", **common)
    ep = estimate(MIXTRAL, parallelism="fsdp-shard-grad-op", expert_parallel=8, **common)
    assert ep.memory.fits and sharded.memory.fits
    assert ep.speed.tokens_per_s > sharded.speed.tokens_per_s


def test_expert_parallel_is_refused_where_it_cannot_run() -> None:
    with pytest.raises(UsageError, match="not a mixture of experts"):
        estimate("gpt2", gpu="a100-80gb:2", expert_parallel=2)
    with pytest.raises(UsageError, match="do not split evenly"):
        estimate(MIXTRAL, gpu="a100-80gb:8", expert_parallel=3, weights_dtype="bf16", parallelism="fsdp-full-shard")


def test_dense_models_do_not_show_expert_parallelism() -> None:
    rec = recommend("gpt2", gpu="a100-80gb:2")
    assert "expert_parallel" not in rec.settings and rec.plan.expert_parallel == 1


def test_step_in_backward_holds_one_layers_gradients() -> None:
    model = profile_model(LLAMA2)
    plan = _plan(num_gpus=1, parallelism="none", micro_batch_size=1, gradient_checkpointing=True)
    full, fused = (
        model_states(model, plan, 1),
        model_states(model, plan.model_copy(update={"optimizer_in_backward": True}), 1),
    )
    assert full.grads == 2 * model.num_parameters
    assert fused.grads == 2 * max(model.num_parameters // model.num_layers, model.largest_parameter_elements)
    assert fused.buckets == 0


def test_zero_offload_beats_a_step_in_backward_that_needs_adafactor_at_equal_penalty() -> None:
    """Full fine-tuning of Llama-2-7B on a 24 GB card at a small batch: the step in backward (torchtune's
    single-device recipe) holds one layer's gradients, so the batch would run on the GPU in one micro-batch, but only
    over bf16 weights with Adafactor (8-bit Adam's 2 B/param do not fit beside them), a risky fallback. ZeRO-Offload
    of AdamW's states pays the same penalty with no risky fallback, so it is taken, and the step in backward's row
    says what it would gain and why it lost."""
    rec = recommend(LLAMA2, gpu="rtx-4090", method="full", global_batch_size=4, host_memory_bytes=512 * 2**30)
    assert (rec.plan.offload, rec.plan.optimizer, rec.plan.weights_dtype) == ("optimizer", "adamw", "fp32")
    assert not rec.plan.optimizer_in_backward
    losing = rec.settings["optimizer_in_backward"].alternatives[0].reason
    assert "tokens/s (+" in losing and "risky fallback, optimizer=adafactor" in losing
    # planned on purpose, the step in backward fits in one micro-batch and its launch file says what it gives up
    step = estimate(
        LLAMA2,
        gpu="rtx-4090",
        method="full",
        micro_batch_size=4,
        gradient_accumulation_steps=1,
        optimizer="adafactor",
        weights_dtype="bf16",
        gradient_checkpointing=True,
        optimizer_in_backward=True,
    )
    assert step.memory.fits and step.speed.tokens_per_s > rec.speed.tokens_per_s
    launch = render(rec.model_copy(update={"plan": step.plan}), ["torchrun"])["launch.sh"]
    assert "optimizer_in_bwd: True" in launch and "Trainer has no option" in launch


def test_step_in_backward_never_accumulates_nor_runs_under_ddp() -> None:
    with pytest.raises(UsageError, match="accumulation"):
        estimate(LLAMA2, gpu="a100-80gb", micro_batch_size=1, gradient_accumulation_steps=4, optimizer_in_backward=True)
    with pytest.raises(UsageError, match="ddp"):
        estimate("gpt2", gpu="a100-80gb:2", optimizer_in_backward=True)


@pytest.mark.slow
def test_emit_refuses_an_expert_parallel_plan_in_one_line() -> None:
    rec = recommend(MIXTRAL, gpu="a100-80gb:8")
    rec = rec.model_copy(update={"plan": rec.plan.model_copy(update={"expert_parallel": 8})})
    with pytest.raises(UsageError, match="expert-model-parallel-size 8"):
        render(rec, ["hf"])


def test_validate_refuses_what_its_trials_cannot_run_in_one_line() -> None:
    from advisor.app.api import validate

    with pytest.raises(UsageError, match="optimizer step in backward"):
        validate("gpt2", seq_len=64, global_batch_size=2, micro_batch_size=2, optimizer_in_backward=True)


def test_async_tensor_parallel_leaves_the_first_steps_share_and_what_exceeds_the_compute() -> None:
    """TP 8 on Llama-2-7B: 4 all-reduces of b·s·h a layer over NVLink; asynchronous tensor parallel (torchtitan,
    under compile) waits for 1/8 of them beside a long compute, for all that exceeds a short one, and the step
    is faster by what it hides; without tensor parallel there is nothing to hide."""
    from advisor.engine.communication import model_parallel_seconds

    model = profile_model(LLAMA2)
    gpu = __import__("conftest").hardware("a100-80gb:8").gpu
    plan = _plan(tensor_parallel=8, parallelism="fsdp-full-shard", torch_compile=True)
    vanilla = model_parallel_seconds(model, plan, 4096, gpu, True, 1)
    assert vanilla == pytest.approx(4 * 32 * 2 * 7 / 8 * 4096 * 4096 * 2 / 300e9)
    async_tp = plan.model_copy(update={"async_tp": True})
    assert model_parallel_seconds(model, async_tp, 4096, gpu, True, 1, compute_s=10.0) == pytest.approx(vanilla / 8)
    assert model_parallel_seconds(model, async_tp, 4096, gpu, True, 1, compute_s=vanilla / 2) == pytest.approx(
        vanilla / 2
    )
    two_nodes = dict(gpu="a100-80gb:8", nodes=2, tensor_parallel=8, parallelism="fsdp-full-shard")
    slow = estimate(LLAMA2, **two_nodes, torch_compile=True, micro_batch_size=1, seq_len=4096)
    fast = estimate(LLAMA2, **two_nodes, torch_compile=True, micro_batch_size=1, seq_len=4096, async_tp=True)
    assert fast.speed.step_time_s < slow.speed.step_time_s and "async TP" in fast.plan.describe()
    with pytest.raises(UsageError, match="tensor-parallel"):
        estimate(LLAMA2, gpu="a100-80gb:8", async_tp=True)
