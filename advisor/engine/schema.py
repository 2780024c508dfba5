"""The version of every JSON advisor prints.

MAJOR.MINOR: MINOR grows with added fields, MAJOR with removed or changed ones.
schema/advisor.schema.json is the committed copy; schema/versions.json pins each version's hash, so a
model change without a new version fails the tests.

1.0: recommend / estimate. 1.1: ValidationReport, field descriptions from the models' docstrings.
1.2: workload.objective (speed | memory). 1.3: plan.cpu_processes; measured.ranks and sync_share
(distributed trials). 1.4: FSDP strategies in plan.parallelism; hardware.interconnect, inter_node_gbit_s.
1.5: plan.tensor_parallel, plan.pipeline_parallel. 1.6: the model's mixture-of-experts facts
(active_parameters, active_matmul_parameters, num_experts, experts_per_token, shared_experts, moe_layers,
capacity_factor). 1.7: the software stack: plan.attention, loss_kernel, torch_compile, packing, fp8; the same as
workload pins, workload.mean_sample_len; hardware.cuda_context_bytes, host.packages; hardware.nics_per_node,
gpus[].peer_to_peer; recommendation.suggestions (slow, consider); inter_node_gbit_s per NIC;
plan.optimizer_in_backward, plan.expert_parallel; model.routed_parameters; Comparison
(``advisor compare --json``). 1.8: plan.checkpointing (full, selective-op, selective-layer). 1.9:
plan.legacy_bitsandbytes (QLoRA on bitsandbytes < 0.43.2), plan.framework (transformers, litgpt). 1.10:
plan.lora_targets / workload.lora_targets "q-v" (the query and value projections: PEFT's default);
plan.double_quant (QLoRA's NF4 with double quantization, or plain NF4). 1.11: plan.framework "megatron"
(Megatron-style fused layers and optimizer). 1.12: plan.activation_offloading (the saved activations in pinned
CPU RAM: TRL's / torchtune's OffloadActivations) and memory.activations_offloaded_bytes. 1.13: recommendation.gains
(what installing a package the plan could not assume where it trains would bring, with the best plan it allows);
model.attention_kernels (the attention implementations transformers' code for the model type runs). 1.14:
memory.fits_capacity (device memory within the whole capacity: a tight plan when fits is false). 1.15:
hardware.cuda_version (--cuda-version), host.torch_version, torch_cuda_version, cuda_module_loading (what sets the
CUDA context's size). 1.16: model.quantization (a pre-quantized checkpoint's quantization_config: method, bits,
double_quant); estimate.warnings (what the rules say of the plan estimated). 1.17: plan.loss_kernel / workload
pin "liger-layers" (Liger's RMSNorm, SwiGLU and RoPE kernels with the model's own loss on whole logits);
plan.virtual_pipeline (the interleaved 1F1B schedule's model chunks a pipeline stage). 1.18: plan.fsdp_version
(FSDP2's fully_shard or FSDP1's FullyShardedDataParallel). 1.19: recommendation.estimate_only (why no emitted
file runs the plan as priced, from the table of dimensions); hardware host.packages' description names
probes.packages. 1.20: plan.weights_dtype "fp16" (a frozen adapter base in fp16 under fp16 mixed precision: V100 /
T4). 1.21: memory.verdict (fits / tight / does not fit: tight up to bands.TIGHT_LIMIT of the capacity),
memory.band and speed.step_time_band (the uncertainty from the published runs' leave-one-source-out residuals).
1.22: plan.context_parallel (each sequence split over C GPUs: ring attention). 1.23: recommendation.hand_off (the
--emit target whose files alone run some settings: trl); hardware.typical_host_memory_bytes / typical_host_source
(the catalog's typical server's RAM, what offload is checked against without --host-memory).
1.24: speed.local_calibration (and compare's rows' local_calibration): the correction of the runs measured on this
machine (advisor runs), when applied. 1.25: memory.paged_bytes (optimizer states bitsandbytes' paged optimizers keep in
CUDA unified memory: outside peak_bytes, evicted to CPU RAM when the device lacks the room). 1.26:
hardware.typical_nic_gbit_s (the InfiniBand adapters of the catalog's typical server: DGX H100 / H200's 400 Gb/s,
what an InfiniBand network is priced at without --inter-node-gbps). 1.27: plan.async_tp (tensor parallel's
collectives overlapped with its matmuls: torchtitan's asynchronous tensor parallel; priced, never emitted).
"""

SCHEMA_VERSION = "1.27"
