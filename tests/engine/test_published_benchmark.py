"""benchmarks/published.py stays runnable: every case carries its provenance, and a few cases go through
``estimate`` to the summary lines of issue 13 (the whole benchmark: ``python benchmarks/published.py``)."""

from __future__ import annotations

import re

import pytest

from benchmarks.published import load_cases, markdown, missing_provenance, ratios, run_case, summary

#: a memory reading, an out-of-memory, two rates of one source (a ratio), a GPU the source does not name;
#: all on closed-form model families, so no torch import
IDS = (
    "litgpt-confighub-llama-2-7b-qlora-1xa10g",
    "litgpt-resource-llama2-13b-none-mb4-1xa100",
    "flashattn-training-gpt3-125m",
    "flashattn-training-gpt3-355m",
    "unsloth-readme-hf-fa2-llama-8b-12gb-maxctx",
)

LINES = {
    "memory": r"memory: n=\d+ median \|error\| \d+\.\d% worst \d+\.\d%",
    "fit": r"fit: n=\d+ agree \d+",
    "ratio": r"ratio: n=\d+ median \d+\.\d\d× within-1\.25x \d+",
    "throughput": r"throughput: n=\d+ median predicted/published \d+\.\d\d within-1\.25x \d+",
}


@pytest.fixture(scope="module")
def results():
    cases = {c["id"]: c for c in load_cases()}
    return [run_case(cases[i]) for i in IDS]


def test_every_case_names_its_source_commit_and_quote() -> None:
    cases = load_cases()
    assert len(cases) >= 60
    assert len({c["id"] for c in cases}) == len(cases)
    assert {c["id"]: missing_provenance(c) for c in cases if missing_provenance(c)} == {}


def test_summary_lines_have_issue_13s_form(results) -> None:
    lines = summary(results)
    for key, pattern in LINES.items():
        assert re.fullmatch(pattern, lines[key]), lines[key]
    assert lines["memory"].startswith("memory: n=1 ")
    assert lines["fit"].startswith("fit: n=4 ")  # the reading, the out-of-memory and the two runs with a rate
    assert lines["ratio"].startswith("ratio: n=1 ")
    assert lines["throughput"].startswith("throughput: n=2 ")


def test_cases_are_compared_like_with_like(results) -> None:
    memory, oom, small, _, unnamed_gpu = results
    assert memory.memory_quantity == "max_memory_allocated" and memory.predicted_bytes > 0
    assert memory.memory_error == pytest.approx(memory.predicted_bytes / memory.measured_bytes - 1)
    assert (oom.fits_published, oom.fit_basis) == (False, "out of memory")
    assert small.rate_unit == "tokens/s/GPU" and small.per_gpu and small.rate_predicted > 0
    assert "flash-attention-2" in small.plan and "packing" in small.plan  # the source's stack, priced
    assert [(a, b) for a, b, _ in ratios(results)] == [("flashattn-training-gpt3-355m", "flashattn-training-gpt3-125m")]
    assert unnamed_gpu.skipped and "catalog" in unnamed_gpu.skipped


def test_report_lists_every_case(results) -> None:
    text = markdown(results, "# test")
    for r in results:
        assert r.id in text
    assert "## Skipped" in text and "why it may differ" in text


def test_the_allocator_reserve_check_reads_both_published_readings_and_inverts_the_model() -> None:
    """benchmarks/allocator_reserve.py: every fms-acceleration case that publishes max_memory_allocated and nvidia-smi
    gives a row; the implied reserve inverts advisor's device_bytes (a reading equal to what advisor models from the
    measured peak implies exactly TRANSIENT_RESERVE)."""
    from benchmarks import allocator_reserve as ar
    from advisor.engine.allocator import TRANSIENT_RESERVE, TRANSIENT_RESERVE_CAP_BYTES

    table = ar.rows()
    assert (
        len(table)
        == sum("mem_nvidia_mem_reserved" in (c["measured"].get("memory_as_written") or "") for c in load_cases())
        >= 10
    )
    for r in table:
        assert 0 < r["states"] < r["allocated"] < r["reading"]
        # advisor's device_bytes from the measured peak (no context) implies the constant, or less where its cap binds
        implied = ar.implied_reserve(r["allocated"], r["modelled"], r["states"])
        capped = 1 + TRANSIENT_RESERVE_CAP_BYTES / (r["allocated"] - r["states"])
        assert implied == pytest.approx(TRANSIENT_RESERVE) or implied == pytest.approx(capped, rel=1e-3)
        assert r["implied_with_context"] < r["implied"]
    assert {line.split(":")[0] for line in ar.summary(table)} == {"reserve one GPU", "reserve FSDP", "reserve all"}


def test_unstated_checkpointing_under_peft_qlora_is_peft_s_default() -> None:
    """PEFT's ``prepare_model_for_kbit_training`` turns checkpointing on: a QLoRA source on transformers + PEFT that
    does not state it is priced with it, and says so; a source that states it keeps its own value."""
    cases = {c["id"]: c for c in load_cases()}
    unstated = run_case(cases["unsloth-readme-hf-fa2-llama-70b-80gb-maxctx"])
    assert "checkpointing" in unstated.plan
    assert any("prepare_model_for_kbit_training" in w for w in unstated.why)
    assert not any("gradient_checkpointing" in w for w in unstated.why)  # no longer left to advisor's default
    stated = run_case(cases["hfqlora-fsdpqlora-llama2-7b-ctx512-mb1-2x3090"])
    assert not any("prepare_model_for_kbit_training" in w for w in stated.why)


def test_a_gpu_the_catalog_lacks_is_priced_with_the_figures_its_source_states() -> None:
    """torchtitan's Grand Teton H100 (96 GB HBM2e, 2.4 TB/s) is the catalog's H100 SXM5 with those two figures: its
    fit verdict is compared against 96 GB, and its memory-bound time runs at 2.4 TB/s."""
    from benchmarks.published import GPU_AS_STATED, estimate_case

    case = next(c for c in load_cases("torchtitan-h100-llama31-8b-fsdp-8xh100"))
    stated = GPU_AS_STATED[case["hardware"]["gpu"]]
    est, _ = estimate_case(case, [])
    assert est.memory.capacity_bytes == stated["memory_total_bytes"]
    as_catalog = dict(case, hardware={**case["hardware"], "gpu": "H100 80GB SXM"})
    faster, _ = estimate_case(as_catalog, [])
    assert faster.speed.step_time_s < est.speed.step_time_s  # 3.35 TB/s
    result = run_case(case)
    assert result.fits_published is True and result.fits_predicted is not None


def test_a_multi_node_case_is_priced_with_the_network_its_source_states() -> None:
    """torchtitan's "RDMA 400 Gb/s per GPU between hosts" is one 400 Gb/s NIC a GPU, a named DGX H100 is priced at its
    reference architecture's 400 Gb/s adapters (the catalog's typical server for an H100), and a source that states
    only "infiniband" on A100s keeps the catalog's HDR figure."""
    from advisor.app.api import probe_hardware
    from benchmarks.published import hardware_options

    notes: list[str] = []
    stated = {
        "gpu": "H100-96GB-HBM2e-500W",
        "count": 16,
        "nodes": 2,
        "interconnect": "NVLink in the host; RDMA 400 Gb/s per GPU between hosts",
    }
    opts = hardware_options({"hardware": stated, "stack": {}}, notes)
    assert (opts["inter_node_gbps"], opts["nics_per_node"], opts["interconnect"]) == (400.0, 8, "infiniband")
    dgx = hardware_options(
        {"hardware": {"gpu": "H100 (DGX-H100)", "count": 64, "nodes": 8, "interconnect": "infiniband"}, "stack": {}},
        notes,
    )
    assert probe_hardware(**dgx).network_gbit_s == 400.0
    selene = hardware_options(
        {"hardware": {"gpu": "A100-SXM4-80GB", "count": 32, "nodes": 4, "interconnect": "infiniband"}, "stack": {}}, []
    )
    assert "inter_node_gbps" not in selene and selene["interconnect"] == "infiniband"
    assert probe_hardware(**selene).network_gbit_s == 200.0
    one_node = hardware_options({"hardware": {**stated, "count": 8, "nodes": 1}, "stack": {}}, [])
    assert "inter_node_gbps" not in one_node


def test_a_case_run_with_async_tensor_parallel_is_priced_with_it_and_its_eager_loss_memory_without() -> None:
    """stack.async_tp reaches estimate (--async-tp); a case compiled without its loss prices memory without compile,
    and so without async TP, which needs compile and moves no memory."""
    from benchmarks.published import estimate_case, stack_options

    cases = {c["id"]: c for c in load_cases("torchtitan-*")}
    async_case = cases["torchtitan-asynctp-llama31-8b-fsdp8-tp8-compile-bf16-asynctp-64xh100"]
    vanilla = cases["torchtitan-asynctp-llama31-8b-fsdp8-tp8-compile-bf16-vanilla-64xh100"]
    assert stack_options(async_case)["async_tp"] is True and "async_tp" not in stack_options(vanilla)
    fast, _ = estimate_case(async_case, [])
    slow, _ = estimate_case(vanilla, [])
    assert fast.speed.step_time_s < slow.speed.step_time_s and fast.memory.peak_bytes == slow.memory.peak_bytes
    eager_loss = cases["torchtitan-h100-llama31-70b-2d-asynctp-fsdp32-tp8-compile-float8-256xh100"]
    notes: list[str] = []
    est, _ = estimate_case(eager_loss, notes)
    assert est.plan.async_tp and any("loss computed outside" in n for n in notes)


def test_model_parallel_names_map_to_the_plans_degrees() -> None:
    """``BASE+tpN+ppN+vpN+cpN+epN``: every degree a source states reaches the plan; context parallel takes GPUs from the
    data-parallel replicas (the accumulation that makes the global batch), expert parallel does not."""
    from benchmarks.published import _accumulation, _parallelism

    opts = _parallelism("zero-1+tp4+pp8+vp5+cp2+ep16")
    assert opts == {
        "parallelism": "zero-1",
        "tensor_parallel": 4,
        "pipeline_parallel": 8,
        "virtual_pipeline": 5,
        "context_parallel": 2,
        "expert_parallel": 16,
    }
    case = {"workload": {"micro_batch_size": 1, "global_batch_size": 256}}
    assert _accumulation(case, opts, 128) == 128  # 128 GPUs / (4 x 8 x 2) = 2 replicas
    assert _parallelism("ep8") == {"expert_parallel": 8}


def test_a_paper_case_names_its_config_and_its_global_batch_without_a_micro_batch() -> None:
    """The Megatron-LM paper's Table 1 states the batch but not the micro-batch: estimate gets the global batch and its
    own micro-batch; the model is the case's config folder. ZeRO-Offload on one GPU keeps its sharding (it offloads)."""
    from benchmarks.published import CONFIGS_DIR, model_ref, plan_options

    cases = {c["id"]: c for c in load_cases("megatron-lm-paper-t1-gpt-1p7b*") + load_cases("deepspeed-zero-offload*")}
    paper = cases["megatron-lm-paper-t1-gpt-1p7b-tp1-pp1-32xa100"]
    assert model_ref(paper) == str(CONFIGS_DIR / "megatron-lm-paper--gpt-1p7b")
    notes: list[str] = []
    opts = plan_options(paper, 32, notes)
    assert opts["global_batch_size"] == 512 and "micro_batch_size" not in opts
    assert any("micro-batch not stated" in n for n in notes)
    result = run_case(paper)
    assert not result.skipped and "× 16" in result.plan  # micro-batch 1, accumulated 16 x over 32 replicas = 512
    offload = plan_options(cases["deepspeed-zero-offload-tutorial-gpt2-10b-zero2-offload-1xv100-fits"], 1, [])
    assert (offload["parallelism"], offload["offload"]) == ("zero-2", "optimizer")


def test_checkpointing_policies_without_a_counterpart_skip_and_no_sequence_parallel_is_named() -> None:
    """Korthikanti et al. 2022: Megatron's selective recomputation (attention's core only) and microbatch-level
    recomputation have no advisor policy, so their rows skip with why; a name nobody mapped skips too; torchtitan's
    selective policies are on. A tensor-parallel run without sequence parallelism is priced (advisor's tensor parallel
    splits the norms as sequence parallelism does) and the difference is named; one replica leaves no data-parallel
    flavour unstated."""
    from benchmarks.published import Skip, _checkpointing, plan_options, stack_notes

    assert _checkpointing("selective-op") is True and _checkpointing("full") is True and _checkpointing(False) is False
    for name, words in (("selective-attention", "QK^T"), ("microbatch-level", "appendix C"), ("every-third", "every")):
        with pytest.raises(Skip, match=re.escape(words)):
            _checkpointing(name)
    cases = {c["id"]: c for c in load_cases("act-recompute-paper-t5-gpt-22b-*")}
    full, selective = (
        cases[f"act-recompute-paper-t5-gpt-22b-{k}-tp8-8xa100"] for k in ("full-recompute", "selective-sp")
    )
    assert run_case(selective).skipped.startswith("Megatron-LM's selective activation recomputation")
    assert any("without sequence parallelism" in n for n in stack_notes(full))
    assert not any("sequence parallelism" in n for n in stack_notes(selective))
    notes: list[str] = []
    assert plan_options(full, 8, notes)["tensor_parallel"] == 8
    assert not any("parallelism" in n for n in notes if n.startswith("not stated"))
    result = run_case(full)
    assert not result.skipped and result.rate_published == 721.13 and result.rate_predicted > 0
