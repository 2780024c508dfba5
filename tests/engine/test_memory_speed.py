"""Properties of the analytic memory and speed models, and the ZeRO paper's model-state figures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from advisor.engine.memory import estimate_memory
from advisor.engine.speed import estimate_speed, forward_flops
from probes.model import profile_model
from rules import Plan
from conftest import cuda_plan  # noqa: E402

GIB = 1024**3
GPT2 = profile_model("gpt2")


def _plan(**kw) -> Plan:
    return cuda_plan(**{"micro_batch_size": 4, **kw})


def _mem(model=GPT2, seq=512, **kw):
    return estimate_memory(model, _plan(**kw), seq, 80 * GIB)


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 32),
    seq=st.sampled_from([128, 512, 1024]),
    precision=st.sampled_from(["fp32", "bf16"]),
    ckpt=st.booleans(),
    opt=st.sampled_from(["adamw", "adafactor", "adamw-8bit", "sgd"]),
)
def test_memory_grows_with_the_micro_batch(b, seq, precision, ckpt, opt) -> None:
    small = _mem(seq=seq, micro_batch_size=b, precision=precision, gradient_checkpointing=ckpt, optimizer=opt)
    large = _mem(seq=seq, micro_batch_size=b + 1, precision=precision, gradient_checkpointing=ckpt, optimizer=opt)
    assert large.components.activations_bytes > small.components.activations_bytes
    assert large.peak_bytes >= small.peak_bytes  # equal while the optimizer step is the peak (tiny batches)
    assert small.device_bytes > small.peak_bytes  # allocator reserve and CUDA context come on top


def test_a_plan_within_capacity_but_not_the_margin_is_tight() -> None:
    device = _mem(micro_batch_size=8).device_bytes
    verdicts = {}
    for share in (0.80, 0.95, 1.01, 1.06):  # device memory as a share of the capacity
        mem = estimate_memory(GPT2, _plan(micro_batch_size=8), 512, int(device / share))
        assert mem.device_bytes == device
        verdicts[share] = (mem.fits, mem.fits_capacity, mem.verdict)
    # tight up to bands.TIGHT_LIMIT (1.05) of the capacity: within the memory model's error of it
    assert verdicts == {
        0.80: (True, True, "fits"),
        0.95: (False, True, "tight"),
        1.01: (False, False, "tight"),
        1.06: (False, False, "does not fit"),
    }


def test_the_documents_bytes_per_parameter() -> None:
    P = GPT2.num_parameters
    fp32 = _mem(precision="fp32").components
    assert fp32.weights_bytes == 4 * P and fp32.gradients_bytes == 4 * P and fp32.optimizer_states_bytes == 8 * P
    mixed = _mem(precision="bf16").components
    assert mixed.weights_bytes == 4 * P + 2 * GPT2.matmul_parameters  # ~6 B/param
    assert _mem(optimizer="adamw-8bit").components.optimizer_states_bytes == 2 * P
    assert _mem(optimizer="sgd").components.optimizer_states_bytes == 4 * P
    assert _mem(optimizer="adafactor").components.optimizer_states_bytes < 0.01 * P * 4


def test_checkpointing_and_mixed_precision_cut_activations() -> None:
    base = _mem(micro_batch_size=16, precision="fp32").components.activations_bytes
    assert _mem(micro_batch_size=16, precision="bf16").components.activations_bytes < base
    # gpt2's fp32 logits (16 x 512 x 50257 x 4 B = 1.6 GB) stay; the 12 blocks shrink to their inputs
    assert (
        _mem(micro_batch_size=16, precision="fp32", gradient_checkpointing=True).components.activations_bytes < base / 2
    )


def test_logits_and_loss_are_fp32() -> None:
    # gpt2 at 4 x 512: one fp32 logits tensor is 4*512*50257*4 bytes = 392.6 MiB. The forward keeps
    # the logits and the log-softmax output (fp32); the start of backward adds the loss gradient.
    logits = 4 * 512 * 50257 * 4
    fp32 = _mem(micro_batch_size=4, precision="fp32").components
    assert fp32.activations_bytes >= 2 * logits and fp32.temporary_bytes >= 0.99 * logits  # fitted: 1 % slack
    bf16 = _mem(micro_batch_size=4, precision="bf16").components
    assert bf16.activations_bytes >= 2.5 * logits  # + the 16-bit logits before their fp32 copy


def test_zero_paper_model_state_figures() -> None:
    # ZeRO paper, Figure 1: Psi = 7.5B, N_d = 64, K = 12 (mixed-precision Adam): 120, 31.4, 16.6, 1.9 GB
    psi = 7_500_000_000
    model = GPT2.model_copy(update={"num_parameters": psi, "matmul_parameters": psi, "parameter_shapes": [((1,), 1)]})

    def states(parallelism: str) -> float:
        plan = _plan(parallelism=parallelism, num_gpus=64, micro_batch_size=1)
        c = estimate_memory(model, plan, 1, 80 * GIB).components
        weights = c.weights_bytes - (2 * psi if parallelism == "ddp" else 0)  # autocast copies are not model states
        grads = c.gradients_bytes - (4 * psi if parallelism == "ddp" else 0)  # DDP's bucket copy neither
        if parallelism != "ddp":  # DeepSpeed's own buffers, which the paper leaves out: the fp32 gradient
            # partition and overlap_comm's buckets (4.5 × 2 B × (reduce + all-gather bucket); stage 3: reduce only)
            grads -= 4 * psi // 64 + 9 * 768**2 * (1 if parallelism == "zero-3" else 2)
        return (weights + grads + c.optimizer_states_bytes) / 1e9

    assert round(states("ddp")) == 120
    assert round(states("zero-1"), 1) == 31.4
    assert round(states("zero-2"), 1) == 16.6
    assert round(states("zero-3"), 1) == 1.9


def test_speed_checkpointing_costs_a_forward_and_fp16_beats_fp32_on_v100() -> None:
    from probes.gpu_catalog import gpu_info_from_catalog, catalog

    v100 = gpu_info_from_catalog(catalog()["v100-16gb"])
    bert = profile_model("bert-large-uncased", "sequence-classification")

    def speed(**kw):
        plan = _plan(tf32=False, **kw)
        mem = estimate_memory(bert, plan, 512, 16 * GIB)
        return estimate_speed(bert, plan, 512, mem, v100, None)

    fp32, fp16 = speed(precision="fp32"), speed(precision="fp16")
    assert 1.5 < fp32.step_time_s / fp16.step_time_s < 3.5  # the seeds: "almost twice as fast"
    ckpt = speed(precision="fp16", gradient_checkpointing=True)
    assert 1.15 < ckpt.step_time_s / fp16.step_time_s < 1.45  # the seeds: ~20-30 % slower
    assert fp16.flops_per_step == 3 * forward_flops(bert, 4, 512)


def test_fsdp_strategies_cost_what_their_zero_counterparts_cost() -> None:
    """SHARD_GRAD_OP ~ ZeRO-2, FULL_SHARD ~ ZeRO-3 (PyTorch FSDP docs, ShardingStrategy), less DeepSpeed's own
    buffers (the fp32 gradient partition, overlap_comm's buckets), and with FSDP's gathered units instead of ZeRO-3's
    two largest tensors: the root unit (embedding and untied LM head, not resharded after the forward) and two
    transformer blocks (the one computing, the one prefetched); one micro-batch."""
    from advisor.app.api import estimate

    def est(parallelism: str, **kw):
        return estimate(
            "meta-llama/Llama-2-7b-hf",
            gpu="a100-80gb:8",
            seq_len=1024,
            micro_batch_size=1,
            parallelism=parallelism,
            **kw,
        )

    for fsdp, zero in (("fsdp-shard-grad-op", "zero-2"), ("fsdp-full-shard", "zero-3")):
        a, b = est(fsdp), est(zero)
        P, h, v, layers = 6_738_415_616, 4096, 32000, 32
        own = 4 * P // 8 + 9 * h * h * (2 if zero == "zero-2" else 1)
        if zero == "zero-3":  # 16-bit gathered parameters: FSDP's units, ZeRO-3's two embedding-sized tensors
            root = 2 * v * h
            own -= 2 * (root + 2 * (P - root) / layers) - 2 * 2 * v * h
        assert a.memory.peak_bytes == pytest.approx(b.memory.peak_bytes - own, abs=2)
        # ZeRO-2's parameter all-gather after the step is exposed; ZeRO-3 calls NCCL once per fetched linear layer
        # (7 a Llama block) and reduces in buckets, FSDP once per unit: the same bytes, more calls
        assert b.speed.communication_s > a.speed.communication_s


def test_hybrid_shard_keeps_the_parameter_gathers_inside_the_node() -> None:
    from advisor.app.api import estimate

    def est(parallelism: str, interconnect: str):
        return estimate(
            "meta-llama/Llama-2-7b-hf",
            gpu="a100-40gb:2",
            nodes=4,
            seq_len=1024,
            micro_batch_size=1,
            gradient_accumulation_steps=4,
            precision="bf16",
            parallelism=parallelism,
            interconnect=interconnect,
            gradient_checkpointing=True,
        )

    full, hybrid = est("fsdp-full-shard", "ethernet"), est("fsdp-hybrid-shard", "ethernet")
    assert hybrid.speed.communication_s < full.speed.communication_s
    assert hybrid.memory.peak_bytes > full.memory.peak_bytes  # sharded over 2 GPUs, not 8
    slow, fast = est("fsdp-full-shard", "ethernet"), est("fsdp-full-shard", "infiniband")
    # one 100 Gb/s Ethernet NIC per node vs InfiniBand's one 200 Gb/s NIC per GPU (2 here): 4x the collectives'
    # time between nodes; the compute beside them hides a smaller share of the longer
    assert 4 * fast.speed.communication_s <= slow.speed.communication_s < 8 * fast.speed.communication_s


def test_interconnect_flags_change_the_links() -> None:
    from advisor.app.api import probe_hardware
    from advisor.core.errors import UsageError

    nvlinked = probe_hardware("a100-80gb:4")
    assert nvlinked.all_pairs_nvlink
    pcie = probe_hardware("a100-80gb:4", interconnect="pcie")
    assert not pcie.all_pairs_nvlink and all(link.pcie_relation == "PHB" for link in pcie.links)
    net = probe_hardware("a100-40gb:2", nodes=4, interconnect="pcie,ethernet", inter_node_gbps=400)
    assert net.interconnect == "ethernet" and net.inter_node_gbit_s == 400 and net.inter_node_bytes_per_s == 50e9
    with pytest.raises(UsageError, match="no NVLink"):
        probe_hardware("t4:2", interconnect="nvlink")
    with pytest.raises(UsageError, match="choose nvlink or pcie"):
        probe_hardware("a100-80gb:2", interconnect="carrier-pigeon")


def test_tensor_and_pipeline_parallel_split_the_model_states() -> None:
    """Model parallel (Narayanan et al. 2021): 1/(t·p) of the states per GPU; TP with sequence parallelism 1/t of the
    activations (Korthikanti et al. 2022, Table 2)."""
    from advisor.app.api import estimate

    def est(tp: int = 1, pp: int = 1, **kw):
        return estimate(
            "meta-llama/Llama-2-7b-hf",
            gpu="a100-80gb:8",
            seq_len=1024,
            micro_batch_size=1,
            gradient_accumulation_steps=8,
            precision="bf16",
            parallelism="none",
            tensor_parallel=tp,
            pipeline_parallel=pp,
            **kw,
        )

    one = estimate(
        "meta-llama/Llama-2-7b-hf",
        gpu="a100-80gb",
        seq_len=1024,
        micro_batch_size=1,
        gradient_accumulation_steps=8,
        precision="bf16",
    )
    tp8 = est(8)
    c1, c8 = one.memory.components, tp8.memory.components
    assert c8.optimizer_states_bytes == pytest.approx(c1.optimizer_states_bytes / 8, rel=1e-6)
    assert c8.gradients_bytes == pytest.approx(c1.gradients_bytes / 8, rel=1e-6)
    assert c8.activations_bytes == pytest.approx(c1.activations_bytes / 8, rel=1e-3)
    assert tp8.speed.communication_s > 0  # 4 all-reduces per layer over NVLink


def test_the_interleaved_schedule_shrinks_the_bubble_for_activations_and_traffic() -> None:
    """Interleaved 1F1B with v chunks a stage (Narayanan et al. 2021 sec. 2.2.2): the bubble of (p − 1) stage times
    becomes (p − 1)/v, each chunk sends its own activations, and the first stage holds 1 + (p − 1)/(p·v)
    micro-batches' activations (Megatron-Core's warm-up; Korthikanti et al. 2022 sec. 4.2.3)."""
    from advisor.app.api import estimate
    from advisor.engine.memory import pipeline_in_flight

    def est(v: int):
        return estimate(
            "meta-llama/Llama-2-7b-hf",
            gpu="a100-80gb:8",
            seq_len=2048,
            micro_batch_size=1,
            gradient_accumulation_steps=8,
            precision="bf16",
            parallelism="ddp",
            pipeline_parallel=4,
            virtual_pipeline=v,
        )

    plain, interleaved = est(1), est(2)
    assert pipeline_in_flight(interleaved.plan) == pytest.approx(1 + 3 / 8)
    assert interleaved.memory.components.activations_bytes == pytest.approx(
        plain.memory.components.activations_bytes * (1 + 3 / 8), rel=1e-6
    )
    assert interleaved.speed.step_time_s < plain.speed.step_time_s
    # the bubble: 8 + 3 stage times against 8 + 1.5 (less the extra chunk-to-chunk sends)
    assert plain.speed.step_time_s / interleaved.speed.step_time_s < (8 + 3) / (8 + 1.5)
    assert interleaved.speed.communication_s > plain.speed.communication_s
    # the pipeline's warning points a plain 1F1B plan to the interleaved schedule, not one that has it
    tip = [any("--virtual-pipeline 2" in w.message for w in e.warnings) for e in (plain, interleaved)]
    assert tip == [True, False]


@pytest.mark.slow
def test_pipeline_bubble_and_model_parallel_in_the_planner() -> None:
    from advisor.app.api import estimate, recommend
    from advisor.app.emit import render
    from advisor.core.errors import UsageError

    def step(pp: int, k: int) -> float:
        return estimate(
            "meta-llama/Llama-2-7b-hf",
            gpu="a100-40gb:2",
            nodes=4,
            seq_len=1024,
            micro_batch_size=1,
            gradient_accumulation_steps=k,
            precision="bf16",
            tensor_parallel=2,
            pipeline_parallel=pp,
            parallelism="none" if pp == 4 else "ddp",
        ).speed.step_time_s

    # 1F1B: (k + p - 1) stage times; more micro-batches amortise the bubble
    assert step(4, 8) / 8 > step(4, 32) / 32
    rec = recommend("meta-llama/Meta-Llama-3-8B", gpu="v100-16gb:8", seq_len=8192)  # sharded DP does not fit
    # DGX-1's cube-mesh: tensor parallel inside a fully NVLink-joined quad of V100s, not across all eight; fp16 on
    # the bf16-pretrained model is a fallback now, not a refusal (issue 14)
    assert rec.plan.tensor_parallel in (2, 4) and rec.memory.fits and rec.plan.precision == "fp16"
    assert "4 all-reduces per layer" in rec.settings["tensor_parallel"].rationale
    # the Trainer runs TP through accelerate's ParallelismConfig (beside FSDP2 here), never PP
    assert any(
        f"ParallelismConfig(tp_size={rec.plan.tensor_parallel})" in w.message and "not beside DDP" not in w.message
        for w in rec.warnings
    )
    with pytest.raises(UsageError, match="tensor parallel"):
        render(rec, ["all"])
    small = recommend("gpt2", gpu="a100-80gb:8")
    assert small.plan.model_parallel_size == 1
    reasons = [a.reason for a in small.settings["tensor_parallel"].alternatives]
    assert all("not needed" in r for r in reasons)


# -- issue 14: DeepSpeed's own buffers and communication under accumulation ---------------------------------------


def _states(model, **kw):
    from advisor.engine.states import model_states

    s = model_states(model, _plan(**kw), 1)
    return s.weights + s.grads + s.optimizer, s.buckets


@pytest.mark.parametrize(
    "name,gpus,stage",
    [
        ("meta-llama/Llama-2-7b-hf", 8, 2),
        ("meta-llama/Llama-2-7b-hf", 8, 3),
        ("facebook/opt-1.3b", 4, 2),
        ("facebook/opt-1.3b", 16, 3),
        ("gpt2-xl", 8, 2),
    ],
)
def test_zero_model_states_against_deepspeeds_estimator(name, gpus, stage) -> None:
    """DeepSpeed's estimators (``estimate_zero2_model_states_mem_needs``: 2Ψ + 18Ψ/N without offload, the
    16-bit parameters plus the fp32 master, Adam's moments, the fp32 gradient partition and the 16-bit gradient
    partition; ``estimate_zero3_…``: 4·largest layer + 18Ψ/N). advisor's stage 3 adds the 16-bit gradient
    partition (2Ψ/N) the stage-3 estimator leaves out; both exclude ``overlap_comm``'s buckets."""
    ds = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    ds3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    model = profile_model(name)
    P, largest = model.num_parameters, model.largest_parameter_elements
    ours, buckets = _states(model, parallelism=f"zero-{stage}", num_gpus=gpus)
    if stage == 2:
        _, theirs = ds.estimate_zero2_model_states_mem_needs(P, num_gpus_per_node=gpus, cpu_offload=False)
        assert ours == pytest.approx(theirs, rel=0.001)
        assert buckets == int(9 * 2 * model.hidden_size**2)  # 4.5 × 2 B × (reduce + all-gather buckets)
    else:
        _, theirs, _ = ds3.estimate_zero3_model_states_mem_needs(
            P, largest, num_gpus_per_node=gpus, cpu_offload=False, cpu_offload_params=False
        )
        assert ours - 2 * P // gpus == pytest.approx(theirs, rel=0.001)
        assert buckets == int(9 * model.hidden_size**2)  # the reduce bucket only


def test_llama2_7b_zero2_model_states_by_hand() -> None:
    """Llama-2-7B (Ψ = 6,738,415,616) on 8 GPUs, ZeRO-2, bf16 AMP + AdamW: 2Ψ + (2 + 4 + 4 + 8)Ψ/8 = 28.64e9 B
    (26.67 GiB, DeepSpeed's ``estimate_zero2_model_states_mem_needs_all_cold`` prints the same), plus
    2 × 9 × 4096² B of buckets; FSDP with accumulation keeps its gradients sharded (sync_each_batch, emitted)."""
    llama = profile_model("meta-llama/Llama-2-7b-hf")
    P = 6_738_415_616
    assert llama.num_parameters == P
    ours, buckets = _states(llama, parallelism="zero-2", num_gpus=8)
    assert ours == 2 * P + 2 * P // 8 + 4 * P // 8 + (4 * P + 8 * P) // 8
    assert ours / GIB == pytest.approx(26.67, abs=0.01) and buckets == 2 * 9 * 4096 * 4096
    from advisor.engine.states import model_states

    one = model_states(llama, _plan(parallelism="fsdp-full-shard", num_gpus=8), 1)
    four = model_states(llama, _plan(parallelism="fsdp-full-shard", num_gpus=8, gradient_accumulation_steps=4), 1)
    assert one.grads == four.grads == 2 * P // 8 and four.buckets == 0


def _comm(model, compute=None, nodes=1, inter=None, nvlink=True, gpu="a100-80gb", **kw) -> float:
    from advisor.engine.communication import communication_seconds
    from probes.gpu_catalog import catalog, gpu_info_from_catalog

    return communication_seconds(
        model, _plan(**kw), gpu_info_from_catalog(catalog()[gpu]), nvlink, nodes, inter, compute
    )


def _nccl_us(steps_intra: int, steps_net: int = 0, intra: float = 3.4) -> float:
    """NCCL's ring latency by hand (``src/graph/tuning.cc``, Simple protocol): 8.4 µs + 3.4 µs an NVLink step
    (5.7 PCIe) + 14 µs a network step, in seconds."""
    return (8.4 + steps_intra * intra + steps_net * 14.0) * 1e-6


def test_communication_under_accumulation_by_hand() -> None:
    """Hand-computed exposed seconds, compute long enough (half of each overlappable collective exposed).
    A100 SXM NVLink: 300 GB/s one direction; Llama-2-7B, 16-bit Ψ = 2·6,738,415,616 B; n = 8, k = 4; every call
    pays NCCL's latency L (7 ring steps) per bucket of 5e8 elements (ZeRO-1/2 and ZeRO-3's reduce-scatter: 14), block
    (FSDP: 32), fetched linear layer (ZeRO-3's all-gathers: 7 a block) or DDP bucket of 25 MiB (the fp32 gradients:
    1029 of them, 14 ring steps each)."""
    llama = profile_model("meta-llama/Llama-2-7b-hf")
    S, bw, ring, L = 2 * llama.num_parameters, 300e9, 7 / 8, _nccl_us(7)
    k = dict(gradient_accumulation_steps=4, num_gpus=8)
    # ZeRO-2: 4 reduce-scatters (half exposed) + the parameter all-gather after the step
    assert _comm(llama, parallelism="zero-2", **k) == pytest.approx(
        4 * 0.5 * (ring * S / bw + 14 * L) + ring * S / bw + 14 * L
    )
    # ZeRO-3: 4 × (2 all-gathers + 1 reduce-scatter), half exposed: 1.5·k all-reduces' worth before overlap; a block
    # holds 0.2e9 elements, under DeepSpeed's reuse distance: no third gather even with checkpointing
    zero3_calls = 2 * 32 * 7 + 14
    assert _comm(llama, parallelism="zero-3", **k) == pytest.approx(4 * (3 * ring * S / bw + zero3_calls * L) * 0.5)
    # FSDP FULL_SHARD with sync_each_batch (emitted): as ZeRO-3; SHARD_GRAD_OP: 4 × (1 all-gather + 1 reduce-scatter)
    assert _comm(llama, parallelism="fsdp-full-shard", **k) == pytest.approx(4 * (3 * ring * S / bw + 96 * L) * 0.5)
    assert _comm(llama, parallelism="fsdp-shard-grad-op", **k) == pytest.approx(4 * (2 * ring * S / bw + 64 * L) * 0.5)
    # DDP: one fp32 all-reduce per step (no_sync), half exposed
    assert _comm(llama, parallelism="ddp", **k) == pytest.approx(0.5 * (2 * ring * 2 * S / bw + 1029 * _nccl_us(14)))
    # the collective hides at most behind the compute beside it: with 10 ms of compute per micro-batch
    per_micro = 3 * ring * S / bw + zero3_calls * L
    assert _comm(llama, compute=0.01, parallelism="zero-3", **k) == pytest.approx(4 * (per_micro - 0.01))


def test_hybrid_shard_shares_the_nodes_network_by_hand() -> None:
    """opt-1.3b, 2 nodes × 8 A100, Ethernet 100 Gb/s per node (12.5e9 B/s): HYBRID_SHARD sends the whole
    16-bit gradient's all-reduce through the node's link, 2·(2−1)/2·S, as DDP's ring sends 2·(16−1)/16 of its
    fp32 gradients; inside the node 2 all-gathers + 1 reduce-scatter over NVLink; all half exposed. NCCL's latency:
    24 blocks × 3 calls inside the node (7 NVLink steps), 24 all-reduces between the nodes (2 network steps, times
    the ring's multi-node plateau 1.4 on an A100; NCCL's tree is slower at these sizes); DDP: 201 buckets of 25 MiB,
    28 ring steps of which 2 cross the network."""
    opt = profile_model("facebook/opt-1.3b")
    S, net, nv = 2 * opt.num_parameters, 12.5e9, 300e9
    inside, between = 72 * _nccl_us(7), 24 * 1.4 * _nccl_us(0, 2)
    hybrid = _comm(opt, nodes=2, inter=net, parallelism="fsdp-hybrid-shard", num_gpus=16)
    assert hybrid == pytest.approx(0.5 * (3 * 7 / 8 * S / nv + inside) + 0.5 * (2 * 1 / 2 * S / net + between))
    # every micro-batch syncs (sync_each_batch): with 4 of them, 4 times both
    four_micro = _comm(
        opt, nodes=2, inter=net, parallelism="fsdp-hybrid-shard", num_gpus=16, gradient_accumulation_steps=4
    )
    assert four_micro == pytest.approx(4 * hybrid)
    ddp = _comm(opt, nodes=2, inter=net, parallelism="ddp", num_gpus=16)
    assert ddp == pytest.approx(0.5 * (2 * 15 / 16 * 2 * S / net + 201 * 1.4 * _nccl_us(28, 2)))
    # the network part does not shrink with the GPUs per node (it did: the node's link counted once per GPU)
    four = _comm(opt, nodes=2, inter=net, parallelism="fsdp-hybrid-shard", num_gpus=8)
    assert four - 0.5 * (3 * 3 / 4 * S / nv + 72 * _nccl_us(3)) == pytest.approx(
        hybrid - 0.5 * (3 * 7 / 8 * S / nv + inside)
    )


def test_zero_figures_against_deepspeeds_printed_all_cold_tables(capsys) -> None:
    """The tables ``estimate_zero2/3_model_states_mem_needs_all_cold`` print (GiB per GPU, no offload), for
    Llama-2-7B over 4 nodes × 2 GPUs (the issue's command): ZeRO-2 26.67 GiB; ZeRO-3 14.61 GiB, to which advisor
    adds the 16-bit gradient partition the stage-3 estimator leaves out (2Ψ/N)."""
    ds2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    ds3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    import re

    llama = profile_model("meta-llama/Llama-2-7b-hf")
    P, largest = llama.num_parameters, llama.largest_parameter_elements

    def printed(fn, *args) -> float:
        fn(*args, num_gpus_per_node=2, num_nodes=4)
        rows = [
            line
            for line in capsys.readouterr().out.splitlines()
            if line.rstrip().endswith(("offload_optimizer=none", "offload_optimizer=none, zero_init=1"))
        ]
        return float(re.findall(r"\|\s+([\d.]+)GB\s+\|", rows[0])[0])

    zero2, zero3 = (
        printed(ds2.estimate_zero2_model_states_mem_needs_all_cold, P),
        printed(ds3.estimate_zero3_model_states_mem_needs_all_cold, P, largest),
    )
    ours2, _ = _states(llama, parallelism="zero-2", num_gpus=8)
    ours3, _ = _states(llama, parallelism="zero-3", num_gpus=8)
    assert (zero2, zero3) == (26.67, 14.61)
    assert ours2 / GIB == pytest.approx(zero2, abs=0.01)
    assert (ours3 - 2 * P // 8) / GIB == pytest.approx(zero3, abs=0.01)


def test_fsdp_qlora_gathers_the_bf16_root_unit_and_two_4_bit_blocks() -> None:
    """FSDP + QLoRA (Answer.AI's fsdp_qlora, the Trainer's FSDP): each device keeps 1/n of the frozen base and, at the
    peak, the unsharded root unit (embedding and LM head, in the weights' dtype) and two 4-bit blocks."""
    from advisor.engine.states import model_states
    from probes.adapters import adapter_parameters, frozen_base_bytes
    from probes.model import profile_model
    from rules import Plan

    model = profile_model("meta-llama/Llama-3.1-70B")
    plan = Plan(
        device="cuda",
        precision="bf16",
        tf32=True,
        optimizer="adamw",
        gradient_checkpointing=True,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        parallelism="fsdp-full-shard",
        num_gpus=2,
        method="qlora",
        lora_rank=16,
        lora_targets="all-linear",
        weights_dtype="bf16",
    )
    base = frozen_base_bytes(model, True, 2)
    root = 2 * 2 * model.vocab_size * model.hidden_size  # untied embedding and head, bf16
    adapters = 4 * adapter_parameters(model, 16, "all-linear")
    expected = base // 2 + root + 2 * (base - root) / model.num_layers + adapters
    assert model_states(model, plan, nodes=1).weights == pytest.approx(expected, abs=2)


def test_fsdp_qlora_with_cpu_offload_keeps_the_gathered_units_on_the_gpu_and_the_shards_in_ram() -> None:
    """FSDP's CPUOffload(offload_params=True) under QLoRA (Answer.AI's Llama-2 70B on two 24 GB GPUs): the GPU holds
    the root unit and two blocks as gathered, the CPU RAM the frozen base's shards with the adapters' states; each
    micro-batch fetches the shard over PCIe for the forward and again for the backward."""
    from advisor.engine.communication import offload_seconds
    from advisor.engine.states import host_bytes, model_states
    from probes.adapters import frozen_base_bytes
    from probes.model import profile_model
    from rules import Plan

    model = profile_model("meta-llama/Llama-3.1-70B")
    base_plan = dict(
        device="cuda",
        precision="bf16",
        tf32=True,
        optimizer="adamw",
        gradient_checkpointing=True,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        parallelism="fsdp-full-shard",
        num_gpus=2,
        method="qlora",
        lora_rank=16,
        lora_targets="all-linear",
        weights_dtype="bf16",
    )
    on_gpu = model_states(model, Plan(**base_plan), nodes=1)
    offloaded = model_states(model, Plan(**base_plan, offload="optimizer+parameters"), nodes=1)
    from advisor.engine.communication import PCIE_GBPS
    from probes.adapters import adapter_parameters

    base, A = frozen_base_bytes(model, True, 2), adapter_parameters(model, 16, "all-linear")
    # the base's shard and the adapters' other half left the GPU; the gathered units stayed
    assert on_gpu.weights - offloaded.weights == pytest.approx(base // 2 + 4 * A - 4 * A // 2, abs=2)
    assert offloaded.grads == offloaded.optimizer == 0
    plan = Plan(**base_plan, offload="optimizer+parameters")
    assert host_bytes(model, plan) > base  # both GPUs' shards, with the buffer factor
    fetch = 2 * (base / 2) / (PCIE_GBPS[4] * 1e9)  # the shard crosses PCIe for the forward and the backward
    exposed, hidden = offload_seconds(model, plan, 0.0), offload_seconds(model, plan, 1e9)
    assert exposed > fetch and hidden == pytest.approx(exposed - fetch / 2)  # prefetch hides at most half


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["adamw", "adamw-8bit", "sgd", "adafactor"]),
    st.booleans(),
    st.sampled_from([1, 2, 8]),
    st.booleans(),
    st.sampled_from(["fp32", "bf16"]),
    st.booleans(),
    st.sampled_from(["sdpa", "flash-attention-2", "flash-attention-3"]),
)
def test_the_activation_memo_leaves_out_only_what_activations_do_not_read(
    optimizer, tf32, steps, ckpt, precision, offload, attention
) -> None:
    """advisor.engine.memory remembers activations by plan less tf32, optimizer, accumulation and async TP, and the attention
    kernel but whether it keeps the scores (``eager``, its own key): computed afresh, plans that differ only in those
    keep the same activations."""
    from advisor.engine.memory import _NOT_ACTIVATIONS, _activation_bytes, _activation_bytes_of

    assert _NOT_ACTIVATIONS == {"tf32", "optimizer", "gradient_accumulation_steps", "async_tp"}
    base = _plan(precision=precision, gradient_checkpointing=ckpt, activation_offloading=offload, device="cuda")
    varied = base.model_copy(
        update={
            "optimizer": optimizer,
            "tf32": tf32,
            "gradient_accumulation_steps": steps,
            "attention": attention,
            "async_tp": tf32,
        }
    )
    fresh = _activation_bytes_of(GPT2, varied, 512, False)
    assert fresh == _activation_bytes_of(GPT2, base, 512, False) == _activation_bytes(GPT2, varied, 512, False)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["none", "ddp", "zero-2", "fsdp-full-shard"]),
    st.sampled_from(["full", "lora"]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 8]),
    st.booleans(),
    st.sampled_from(["sdpa", "eager"]),
    st.booleans(),
)
def test_the_states_memo_leaves_out_only_what_the_states_do_not_read(
    parallelism, method, micro, steps, ckpt, attention, compile_
) -> None:
    """advisor.engine.states remembers the model states by plan less the fields ``_NOT_STATES`` names: no line of
    states.py reads one of them, and plans that differ only in them (accumulation: only in how many micro-batches
    beyond one) get the states computed afresh."""
    import re
    from pathlib import Path

    from advisor.engine import states

    read = set(re.findall(r"plan\.([a-z_0-9]+)", Path(states.__file__).read_text()))
    assert not read & (states._NOT_STATES - {"gradient_accumulation_steps"})
    gpus = 1 if parallelism == "none" else 4
    base = _plan(parallelism=parallelism, method=method, num_gpus=gpus, weights_dtype="bf16")
    varied = base.model_copy(
        update={
            "micro_batch_size": micro,
            "gradient_accumulation_steps": steps,
            "gradient_checkpointing": ckpt,
            "attention": attention,
            "torch_compile": compile_,
            "tf32": not ckpt,
        }
    )
    assert states.model_states(GPT2, varied, 1) == states._model_states_of(GPT2, varied, 1)
    if steps == 1:
        assert states._model_states_of(GPT2, varied, 1) == states._model_states_of(GPT2, base, 1)
