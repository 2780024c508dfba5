"""The public documents the rules cite, each declared once (URL + section)."""

from rules.base import Source

_HF_PERF = "https://huggingface.co/docs/transformers/v4.18.0/en/performance"
_HF_ONE = "https://huggingface.co/docs/transformers/perf_train_gpu_one"
_NV_MM = "https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html"

HF_ANATOMY = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#anatomy-of-models-memory",
                    section="Anatomy of Model's Memory")
HF_FP16 = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#fp16", section="fp16")
HF_BF16 = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#bf16", section="bf16")
T5_FP16_OVERFLOW = Source(title="transformers issue 14189: T5 v1.1 loss goes to NaN with fp16",
                          url="https://github.com/huggingface/transformers/issues/14189", section="description")
HF_TF32 = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#tf32", section="tf32")
HF_GRAD_ACC = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#gradient-accumulation",
                     section="Gradient Accumulation")
HF_CKPT = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#gradient-checkpointing",
                 section="Gradient Checkpointing")
HF_BATCH = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#batch-sizes",
                  section="Batch sizes")
HF_DP_DDP = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#dp-vs-ddp", section="DP vs DDP")
HF_DATALOADER = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#dataloader",
                       section="DataLoader")
HF_FASTER_OPT = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#faster-optimizer",
                       section="Faster optimizer")
HF_POWER = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#power-and-cooling",
                  section="Power and Cooling")
HF_CONNECTIVITY = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#multigpu-connectivity",
                         section="Multi-GPU Connectivity")
HF_SCALE = Source(title="HF Performance and Scalability guide", url=f"{_HF_PERF}#how-to-scale",
                  section="How to scale / Multi-GPU Training / What if my model still does not fit?")
HF_ONE_ADAFACTOR = Source(title="HF Efficient Training on a Single GPU", url=f"{_HF_ONE}#adafactor",
                          section="Optimizer choice: Adafactor")
HF_ONE_8BIT = Source(title="HF Efficient Training on a Single GPU", url=f"{_HF_ONE}#8-bit-adam",
                     section="Optimizer choice: 8-bit Adam")
HF_ONE_COMPILE = Source(title="HF Efficient Training on a Single GPU", url=f"{_HF_ONE}#using-torchcompile",
                        section="Using torch.compile")
HF_MANY = Source(title="HF Efficient Training on Multiple GPUs",
                 url="https://huggingface.co/docs/transformers/perf_train_gpu_many",
                 section="Scalability strategy")
HF_DEEPSPEED = Source(title="HF DeepSpeed integration",
                      url="https://huggingface.co/docs/transformers/main/en/deepspeed#select-a-zero-stage",
                      section="Select a ZeRO stage")
NV_TC_REQ = Source(title="NVIDIA Matrix Multiplication Background User's Guide", url=f"{_NV_MM}#requirements-tc",
                   section="Tensor Core Requirements")
NV_FC_BATCH = Source(title="NVIDIA Linear/Fully-Connected Layers User's Guide",
                     url="https://docs.nvidia.com/deeplearning/performance/dl-performance-fully-connected/index.html#batch-size",
                     section="Batch Size")
NV_TF32 = Source(title="NVIDIA blog: Accelerating AI Training with NVIDIA TF32 Tensor Cores",
                 url="https://developer.nvidia.com/blog/accelerating-ai-training-with-tf32-tensor-cores/")
NV_AMP = Source(title="NVIDIA Train With Mixed Precision",
                url="https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html",
                section="Tensor Core architecture support / Loss scaling")
MIXED_PRECISION_PAPER = Source(title="Micikevicius et al. 2018, Mixed Precision Training",
                               url="https://arxiv.org/abs/1710.03740", section="3.2 Loss scaling")
TORCH_AMP = Source(title="PyTorch Automatic Mixed Precision", url="https://pytorch.org/docs/stable/amp.html",
                   section="CPU op-specific behavior / Gradient scaling")
TORCH_TF32 = Source(title="PyTorch CUDA semantics",
                    url="https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
                    section="TensorFloat-32 (TF32) on Ampere (and later) devices")
TORCH_ADAMW = Source(title="PyTorch torch.optim.AdamW",
                     url="https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html",
                     section="foreach / fused arguments")
TORCH_DP = Source(title="PyTorch torch.nn.DataParallel",
                  url="https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html",
                  section="warning: use DistributedDataParallel instead")
TORCH_PIN = Source(title="PyTorch torch.utils.data", url="https://pytorch.org/docs/stable/data.html#memory-pinning",
                   section="Memory Pinning / Multi-process data loading")
TORCH_COMPILE = Source(title="PyTorch Introduction to torch.compile",
                       url="https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html")
CHECKPOINT_PAPER = Source(title="Chen et al. 2016, Training Deep Nets with Sublinear Memory Cost",
                          url="https://arxiv.org/abs/1604.06174")
ADAFACTOR_PAPER = Source(title="Shazeer & Stern 2018, Adafactor", url="https://arxiv.org/abs/1804.04235",
                         section="3 Factored second moment estimation")
EIGHT_BIT_PAPER = Source(title="Dettmers et al. 2022, 8-bit Optimizers via Block-wise Quantization",
                         url="https://arxiv.org/abs/2110.02861")
ZERO_PAPER = Source(title="Rajbhandari et al. 2020, ZeRO", url="https://arxiv.org/abs/1910.02054",
                    section="5 Deep dive into ZeRO-DP / 7 Communication analysis")
SQRT_SCALING = Source(title="Malladi et al. 2022, On the SDEs and Scaling Rules for Adaptive Gradient Algorithms",
                      url="https://arxiv.org/abs/2205.10287", section="Square-root scaling rule")
LINEAR_SCALING = Source(title="Goyal et al. 2017, Accurate, Large Minibatch SGD",
                        url="https://arxiv.org/abs/1706.02677", section="2.1 Learning rates for large minibatches")
LIGHTNING_MODEL_PARALLEL = Source(
    title="PyTorch Lightning: Choosing an advanced distributed GPU strategy",
    url="https://lightning.ai/docs/pytorch/stable/advanced/model_parallel.html",
    section="'Model parallel techniques help when model sizes are fairly large; roughly 500M+ parameters'; "
            "the seed lecture review adds: data parallel under ~200M parameters")
CUDA_CC = Source(title="CUDA C++ Programming Guide",
                 url="https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#compute-capabilities",
                 section="Compute Capabilities")
TRITON_CC = Source(title="Triton installation: supported GPUs",
                   url="https://github.com/triton-lang/triton#compatibility",
                   section="Compatibility (NVIDIA GPUs of compute capability 8.0+; 7.0+ in older releases)")
NVML_THROTTLE = Source(title="NVML API: Clock event reasons",
                       url="https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html")
ACCELERATE_FSDP_DEEPSPEED = Source(title="HF Accelerate concept guide: FSDP vs DeepSpeed",
                                   url="https://huggingface.co/docs/accelerate/concept_guides/fsdp_and_deepspeed",
                                   section="On Differences in Sharding Strategies / Offloading")
TORCH_FSDP = Source(title="PyTorch FullyShardedDataParallel", url="https://pytorch.org/docs/stable/fsdp.html",
                    section="ShardingStrategy (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD), CPUOffload")
TORCH_FSDP_NO_SYNC = Source(title="PyTorch FullyShardedDataParallel", url="https://pytorch.org/docs/stable/fsdp.html",
                            section="FullyShardedDataParallel.no_sync (full gradients until the sync); the notes on "
                                    "frozen parameters under use_orig_params=True")
TORCHTITAN_FSDP2 = Source(title="torchtitan docs: FSDP1 -> FSDP2",
                          url="https://github.com/pytorch/torchtitan/blob/main/docs/fsdp.md",
                          section="Why FSDP2? (lower and deterministic GPU memory by avoiding recordStream; 7% lower "
                                  "peak memory than FSDP1 on Llama-7B, 8 H100s)")
ACCELERATE_FSDP1_VS_FSDP2 = Source(title="HF Accelerate concept guide: FSDP1 vs FSDP2",
                                   url="https://huggingface.co/docs/accelerate/concept_guides/fsdp1_vs_fsdp2",
                                   section="How is FSDP2 better than FSDP1? (fsdp_version: 2)")
MEGATRON_SCALING = Source(title="Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters "
                                "Using Megatron-LM", url="https://arxiv.org/abs/2104.04473",
                          section="3.3 Takeaways (tensor parallel inside a node, pipeline across nodes)")
MEGATRON_ZERO3 = Source(title="Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters "
                              "Using Megatron-LM", url="https://arxiv.org/abs/2104.04473",
                        section="5.2 Comparison to ZeRO-3, Table 2: ZeRO-3 without model parallelism on 384-2240 "
                                "A100s, its per-GPU throughput falling as GPUs are added at a fixed batch")
MEGATRON_LM = Source(title="Shoeybi et al. 2019, Megatron-LM", url="https://arxiv.org/abs/1909.08053",
                     section="3 Model Parallel Transformers (2 all-reduces forward, 2 backward per layer)")
ACCELERATE_ND_PARALLEL = Source(title="Hugging Face blog: Accelerate ND-Parallel, a guide to efficient multi-GPU "
                                      "training (2025-08-08)", url="https://huggingface.co/blog/accelerate-nd-parallel",
                                section="ParallelismConfig: tp_size beside dp_shard_size (FSDP2); accelerate 1.10 and "
                                        "later, TrainingArguments.parallelism_config; DDP + TP not composed")
RING_ATTENTION = Source(title="Liu et al. 2023, Ring Attention with Blockwise Transformers",
                        url="https://arxiv.org/abs/2310.01889", section="3 (keys and values passed around a ring of "
                                                                        "devices, overlapped with blockwise attention)")
TORCH_CONTEXT_PARALLEL = Source(title="PyTorch tutorial: Introduction to Context Parallel",
                                url="https://pytorch.org/tutorials/prototype/context_parallel.html",
                                section="context_parallel(): SDPA's flash / efficient kernels, the sequence split in 2c "
                                        "chunks for load balance")
ACCELERATE_CONTEXT_PARALLEL = Source(title="accelerate: Context Parallelism",
                                     url="https://huggingface.co/docs/accelerate/concept_guides/context_parallelism",
                                     section="ParallelismConfig(cp_size=...): FSDP2 and SDPA only")
HF_TENSOR_PARALLEL = Source(title="transformers: Tensor parallelism for training",
                            url="https://huggingface.co/docs/transformers/main/en/tensor_parallelism",
                            section="models whose config defines base_model_tp_plan")
HF_TP_CODE = Source(title="transformers: distributed/tensor_parallel.py",
                    url="https://github.com/huggingface/transformers/blob/main/src/transformers/distributed/"
                        "tensor_parallel.py",
                    section="quantized weights split only where a quantizer marks them (_hf_quantized_needs_local_tp: "
                            "torchao and fine-grained fp8; bitsandbytes does not)")
LORA_PAPER = Source(title="Hu et al. 2021, LoRA: Low-Rank Adaptation of Large Language Models",
                    url="https://arxiv.org/abs/2106.09685", section="sec. 4 and 7")
QLORA_PAPER = Source(title="Dettmers et al. 2023, QLoRA: Efficient Finetuning of Quantized LLMs",
                     url="https://arxiv.org/abs/2305.14314", section="sec. 3 (NF4, double quantization, paged "
                                                                     "optimizers) and 4 (all linear layers)")
LORA_LEARNS_LESS = Source(title="Biderman et al. 2024, LoRA Learns Less and Forgets Less",
                          url="https://arxiv.org/abs/2405.09673", section="sec. 4-5")
PEFT_LORA = Source(title="PEFT LoRA developer guide",
                   url="https://huggingface.co/docs/peft/developer_guides/lora", section="Initialization; target_modules")
PEFT_TARGET_PARAMETERS = Source(title="PEFT LoRA reference: LoraConfig target_parameters (LoRA on nn.Parameter)",
                                url="https://huggingface.co/docs/peft/package_reference/lora#peft.LoraConfig",
                                section="target_parameters: mixture-of-experts weights stored as nn.Parameter, e.g. "
                                        "['feed_forward.experts.gate_up_proj', 'feed_forward.experts.down_proj']")
HF_QUANT_BNB = Source(title="transformers bitsandbytes quantization",
                      url="https://huggingface.co/docs/transformers/quantization/bitsandbytes",
                      section="4-bit (QLoRA algorithm)")
HF_QUANT_OVERVIEW = Source(title="transformers quantization overview",
                           url="https://huggingface.co/docs/transformers/quantization/overview",
                           section="the methods' table (bits, PEFT fine-tuning, serializable)")
PEFT_ACCELERATE = Source(title="PEFT: Fully Sharded Data Parallel (accelerate integration)",
                         url="https://huggingface.co/docs/peft/accelerate/fsdp",
                         section="introduction: FSDP shards a base too large for one GPU; only the adapters train")
PEFT_MODEL_REF = Source(title="PEFT reference: get_peft_model / PeftModel",
                        url="https://huggingface.co/docs/peft/package_reference/peft_model",
                        section="autocast_adapter_dtype (default True: fp16 / bf16 adapter weights are cast to fp32)")
PEFT_QUANTIZATION = Source(title="PEFT quantization guide",
                           url="https://huggingface.co/docs/peft/developer_guides/quantization",
                           section="introduction: a quantized model trains through adapters only")
TORCHTUNE_LOW_PRECISION = Source(title="torchtune: memory optimization overview",
                                 url="https://pytorch.org/torchtune/stable/tutorials/memory_optimizations.html",
                                 section="Lower Precision Training (bf16 weights)")
BF16_UPDATES = Source(title="Zamirai et al. 2020, Revisiting BFloat16 Training (stochastic rounding, Kahan summation)",
                      url="https://arxiv.org/abs/2010.06192", section="sec. 3-4")
ZERO_OFFLOAD_PAPER = Source(title="Ren et al. 2021, ZeRO-Offload", url="https://arxiv.org/abs/2101.06840",
                            section="sec. 4 (single-GPU schedule)")
ZERO_INFINITY_PAPER = Source(title="Rajbhandari et al. 2021, ZeRO-Infinity", url="https://arxiv.org/abs/2104.07857",
                             section="sec. 5 (NVMe offload)")
DEEPSPEED_MEMORY = Source(title="DeepSpeed Memory Requirements", url="https://deepspeed.readthedocs.io/en/latest/memory.html",
                          section="estimate_zero2/3_model_states_mem_needs")
BNB_8BIT_EMBEDDING = Source(title="transformers issue 14819: 8-bit Adam and embeddings",
                            url="https://github.com/huggingface/transformers/issues/14819",
                            section="keep the embedding's optimizer states in 32-bit (StableEmbedding)")
BNB_PAGED = Source(title="bitsandbytes paged optimizers",
                   url="https://huggingface.co/docs/bitsandbytes/main/en/optimizers#paged-optimizers",
                   section="Paged optimizers")
LITGPT = Source(title="LitGPT: model, LoRA and fine-tuning scripts", url="https://github.com/Lightning-AI/litgpt",
                section="litgpt/lora.py (LoRA layers), litgpt/finetune/lora.py (bf16-true, lm_head_chunk_size=128, "
                        "chunked_cross_entropy)")
TORCHTITAN_ASYNC_TP = Source(title="torchtitan: async tensor parallel (parallelize_llama, maybe_enable_async_tp; the "
                                   "async-TP benchmark page)",
                             url="https://github.com/pytorch/torchtitan/blob/main/benchmarks/"
                                 "asyncTP_llama3_h100_2025-06_torchtitan.md",
                             section="Llama3 70b on 256 H100s, FSDP 32 x TP 8: async TP 1.09x (bf16) and 1.16x "
                                     "(float8) the vanilla TP tokens/s; torchtitan/models/llama3/infra/parallelize.py: "
                                     "'Async TP requires torch.compile'")
ASYNC_TP_DECOMPOSITION = Source(title="Wang et al. 2023, Overlap Communication with Dependent Computation via "
                                      "Decomposition in Large Deep Learning Models (ASPLOS '23)",
                                url="https://doi.org/10.1145/3567955.3567959",
                                section="sec. 3-4: a collective decomposed into peer-to-peer steps beside the partial "
                                        "matmuls that consume them")
BNB_PR_1270 = Source(title="bitsandbytes PR 1270: fix QLoRA mem bug: delete useless buffered activation",
                     url="https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1270",
                     section="MatMul4Bit keeps (None, B) instead of (A, B) for backward; released in 0.43.2 "
                             "(2024-07-23)")

# -- the software stack (rules/stack.py) -------------------------------------------------------------
FLASH_ATTENTION_2 = Source(title="Dao 2023, FlashAttention-2", url="https://arxiv.org/abs/2307.08691",
                           section="sec. 4: 2x FlashAttention's speed, 50-73 % of A100 peak; O(s) memory")
FLASH_ATTENTION_3 = Source(title="Shah et al. 2024, FlashAttention-3", url="https://arxiv.org/abs/2407.08608",
                           section="sec. 4: Hopper only, 1.5-2x FlashAttention-2 on H100")
HF_ATTENTION = Source(title="transformers docs, Attention backends",
                      url="https://huggingface.co/docs/transformers/attention_interface",
                      section="attn_implementation: eager, sdpa, flash_attention_2, flash_attention_3")
HF_ATTENTION_SUPPORT = Source(title="transformers docs, GPU inference",
                              url="https://huggingface.co/docs/transformers/v4.49.0/perf_infer_gpu_one",
                              section="FlashAttention-2 and PyTorch scaled dot product attention: the architectures "
                                      "that support each (the model classes' _supports_sdpa / _supports_flash_attn)")
TORCH_SDPA = Source(title="PyTorch docs, scaled_dot_product_attention",
                    url="https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html",
                    section="flash, memory-efficient and math backends")
LIGER_KERNEL = Source(title="Hsu et al. 2024, Liger Kernel: Efficient Triton Kernels for LLM Training",
                      url="https://arxiv.org/abs/2410.10989",
                      section="sec. 3-4: fused linear cross-entropy, RMSNorm, SwiGLU, RoPE; Trainer use_liger_kernel")
LIGER_PATCHING = Source(title="Liger-Kernel README, Patching: apply_liger_kernel_to_llama(rope, swiglu, rms_norm, "
                              "cross_entropy, fused_linear_cross_entropy); transformers TrainingArguments "
                              "liger_kernel_config (the same keywords)",
                        url="https://github.com/linkedin/Liger-Kernel#patching",
                        section="fused_linear_cross_entropy=False keeps the model's own loss on whole logits")
LIGER_COMPILE = Source(title="Liger-Kernel issue 174, torch.compile() throws exception when LigerKernel is used; "
                             "PR 1350, pin fp64 scalar kernel params to fp32 in swiglu and rms_norm",
                       url="https://github.com/linkedin/Liger-Kernel/issues/174",
                       section="Inductor launches Liger's Triton kernels with other scalar types than eager Triton "
                               "(https://github.com/linkedin/Liger-Kernel/pull/1350, Summary)")
TORCHTUNE_CHUNKED_CE = Source(title="torchtune, CEWithChunkedOutputLoss",
                              url="https://pytorch.org/torchtune/stable/generated/torchtune.modules.loss."
                                  "CEWithChunkedOutputLoss.html",
                              section="cross-entropy over chunks, upcast per chunk")
HF_PACKING_FA2 = Source(title="Hugging Face blog, Improving Hugging Face Training Efficiency Through Packing with "
                              "Flash Attention 2", url="https://huggingface.co/blog/packing-with-FA2",
                        section="DataCollatorWithFlattening: padding-free packing, up to 2x throughput")
PACKING_KUNDU = Source(title="Kundu et al. 2024, Enhancing Training Efficiency Using Packing with Flash Attention",
                       url="https://arxiv.org/abs/2407.09105",
                       section="abstract: padding to the longest sequence in each batch, the baseline packing "
                               "improves on")
PACKING_KRELL = Source(title="Krell et al. 2021, Efficient Sequence Packing without Cross-contamination",
                       url="https://arxiv.org/abs/2107.02027", section="fig. 1: skewed sequence-length distributions")
TORCHAO_FLOAT8 = Source(title="torchao float8 training", url="https://github.com/pytorch/ao/tree/main/torchao/float8",
                        section="README: convert_to_float8_training, speed-ups on H100 for Llama 3 8B/70B")
TE_FP8 = Source(title="NVIDIA Transformer Engine, Using FP8 with Transformer Engine",
                url="https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html",
                section="FP8 on Hopper and Ada: delayed scaling, which layers run in FP8")
TORCHTITAN_H100_BENCH = Source(title="torchtitan: Llama 3.1 on H100 (end of 2024)",
                               url="https://github.com/pytorch/torchtitan/blob/main/benchmarks/"
                                   "llama3_h100_202412_torchtitan.md",
                               section="Table 1: FSDP + torch.compile 77.0 GiB, + Float8 76.8 GiB (Llama 3.1 8B, "
                                       "8 H100s)")
PT2_PAPER = Source(title="Ansel et al. 2024, PyTorch 2: Faster Machine Learning Through Dynamic Python Bytecode "
                         "Transformation and Graph Compilation", url="https://pytorch.org/assets/pytorch2-2.pdf",
                   section="sec. 4.3 (AOTAutograd min-cut recomputation), sec. 6 (1.41x training speed-up on A100)")
HF_DEEPSPEED_COMPILE = Source(title="transformers issue 23095, torch.compile with DeepSpeed",
                              url="https://github.com/huggingface/transformers/issues/23095",
                              section="the Trainer does not compile a DeepSpeed engine")
TORCH_OPT_IN_BWD = Source(title="PyTorch tutorial: How to save memory by fusing the optimizer step into the backward pass",
                          url="https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html",
                          section="register_post_accumulate_grad_hook; caveats (no accumulation, no clipping)")
TORCHTUNE_OPT_IN_BWD = Source(title="torchtune: memory optimization overview",
                              url="https://pytorch.org/torchtune/stable/tutorials/memory_optimizations.html"
                                  "#fusing-optimizer-step-into-backward-pass",
                              section="Fusing Optimizer Step into Backward Pass (optimizer_in_bwd)")
GSHARD = Source(title="Lepikhin et al. 2020, GShard: Scaling Giant Models with Conditional Computation",
                url="https://arxiv.org/abs/2006.16668", section="sec. 2.2 (experts sharded, all-to-all dispatch/combine)")
DEEPSPEED_MOE = Source(title="Rajbhandari et al. 2022, DeepSpeed-MoE", url="https://arxiv.org/abs/2201.05596",
                       section="sec. 5 (expert + data parallelism); DeepSpeed MoE tutorial: ep_size")
MEGATRON_MOE = Source(title="Megatron-Core MoE", section="Expert parallelism (--expert-model-parallel-size)",
                      url="https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/moe.html")
MEGATRON_INTERLEAVED = Source(title="Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU "
                              "Clusters Using Megatron-LM", url="https://arxiv.org/abs/2104.04473",
                              section="2.2.2 Schedule with Interleaved Stages: the bubble shrinks by v, the "
                                      "communication grows by v")
MEGATRON_SCHEDULES = Source(title="Megatron-Core pipeline_parallel/schedules.py, "
                                  "forward_backward_pipelining_with_interleaving (virtual_pipeline_model_parallel_size)",
                            url="https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/pipeline_parallel/"
                                "schedules.py")
TORCH_PIPELINING = Source(title="PyTorch torch.distributed.pipelining, Pipeline Schedules (ScheduleInterleaved1F1B)",
                          url="https://pytorch.org/docs/stable/distributed.pipelining.html")
SELECTIVE_AC_PAPER = Source(title="Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models",
                            url="https://arxiv.org/abs/2205.05198", section="5 Selective activation recomputation")
FSDP_QLORA = Source(title="Answer.AI, Benchmarking QLoRA+FSDP (fsdp_qlora)",
                    url="https://github.com/AnswerDotAI/fsdp_qlora/blob/main/benchmarks_03_2024.md",
                    section="'What About CPU Offloading?' and 'Llama 70B': Llama-2 70B QLoRA on two 24 GB GPUs with "
                            "FSDP's CPU offload of the frozen weights")
ACTIVATION_MEMORY_PAPER = Source(title="Korthikanti et al. 2022, Reducing Activation Recomputation in Large "
                                       "Transformer Models", url="https://arxiv.org/abs/2205.05198",
                                 section="4.1 Activations Memory Per Transformer Layer (sbh(34 + 5as/h) in 16 bits)")
MEGATRON_DIST_OPTIMIZER = Source(title="Megatron Core user guide: Distributed Optimizer",
                                 url="https://docs.nvidia.com/megatron-core/developer-guide/latest/"
                                     "distrib_optimizer.html",
                                 section="bytes per parameter: float16 param, fp32 grads: 18 (non-distributed), "
                                         "6 + 12/d (distributed)")
TORCHTITAN_AC = Source(title="torchtitan: activation checkpointing (full, selective op / layer)",
                       url="https://github.com/pytorch/torchtitan/blob/main/torchtitan/distributed/"
                           "activation_checkpoint.py",
                       section="the op-level policy: save attention and every mm but every second one")
TORCH_SAC = Source(title="PyTorch torch.utils.checkpoint: selective activation checkpoint",
                   url="https://pytorch.org/docs/stable/checkpoint.html"
                       "#torch.utils.checkpoint.create_selective_checkpoint_contexts",
                   section="create_selective_checkpoint_contexts")
TRL_ACTIVATION_OFFLOADING = Source(title="TRL: SFTConfig activation_offloading and get_act_offloading_ctx_manager",
                                   url="https://huggingface.co/docs/trl/main/en/model_utils"
                                       "#trl.models.get_act_offloading_ctx_manager",
                                   section="get_act_offloading_ctx_manager (OffloadActivations: pinned memory, "
                                           "streams, forward stash of 5, the output head kept)")
TORCHTUNE_ACTIVATION_OFFLOADING = Source(title="torchtune: memory optimization overview",
                                         url="https://pytorch.org/torchtune/stable/tutorials/memory_optimizations.html"
                                             "#activation-offloading",
                                         section="Activation Offloading (enable_activation_offloading; use with "
                                                 "activation checkpointing)")
MEGATRON_CPU_OFFLOADING = Source(title="Megatron Bridge: CPU offloading",
                                 url="https://docs.nvidia.com/nemo/megatron-bridge/latest/training/cpu-offloading.html",
                                 section="Activation offloading (cpu_offloading_activations): pipeline parallel size "
                                         "must be 1")
CUDA_LAZY_LOADING = Source(title="CUDA C++ Programming Guide: Lazy Loading",
                           url="https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/lazy-loading.html",
                           section="Change history (11.7: introduced; 12.2: default on Linux), Requirements for "
                                   "Lazy Loading (driver R515+), CUDA_MODULE_LOADING")
TORCH_LAZY_LOADING = Source(title="pytorch/pytorch PR 86509: set CUDA_MODULE_LOADING to LAZY when not set",
                            url="https://github.com/pytorch/pytorch/pull/86509",
                            section="description: the context takes 287,047,680 bytes lazily against 666,632,192 "
                                    "eagerly (torch 1.13)")
BNB_FSDP2_ISSUE = Source(title="bitsandbytes issue 1633: illegal memory access with FSDP2",
                         url="https://github.com/bitsandbytes-foundation/bitsandbytes/issues/1633",
                         section="the 8-bit optimizers' init_state and update_step take FSDP2's DTensor parameters as "
                                 "plain tensors (open)")
BNB_FSDP_ISSUE = Source(title="bitsandbytes issue 89: 8-bit optimizers don't work with FSDP",
                        url="https://github.com/bitsandbytes-foundation/bitsandbytes/issues/89", section="(open)")
TORCHAO_OPTIM = Source(title="torchao low-bit optimizers (AdamW8bit)",
                       url="https://github.com/pytorch/ao/blob/main/torchao/optim/adam.py",
                       section="_AdamBase._new_buffer: 8-bit block-wise states (256 elements) of each DTensor's local "
                               "shard, wrapped as a DTensor; README: bnb 8-bit and ao 8-bit at the same peak memory")
HF_TORCHAO_OPTIM = Source(title="transformers: optimizers, torchao (optim='adamw_torch_8bit')",
                          url="https://huggingface.co/docs/transformers/main/en/optimizers#torchao",
                          section="adamw_torch_4bit / adamw_torch_8bit, needs torchao >= 0.4")
ACCELERATE_FP8 = Source(title="accelerate: low precision (FP8) training",
                        url="https://huggingface.co/docs/accelerate/usage_guides/low_precision_training",
                        section="mixed_precision='fp8' with the torchao backend (AORecipeKwargs): the first and last "
                                "linear layers stay in high precision (accelerate/utils/ao.py)")
ALIGNMENT_HANDBOOK_FSDP_QLORA = Source(title="alignment-handbook: recipes/accelerate_configs/fsdp_qlora.yaml (PR 160)",
                                       url="https://github.com/huggingface/alignment-handbook/pull/160/files",
                                       section="FSDP1 (no fsdp_version), FULL_SHARD, fsdp_use_orig_params: false, "
                                               "fsdp_cpu_ram_efficient_loading: true")
BNB_FSDP_QLORA = Source(title="bitsandbytes: FSDP-QLoRA", url="https://huggingface.co/docs/bitsandbytes/main/fsdp_qlora",
                        section="bnb_4bit_quant_storage in the compute dtype so that FSDP shards Params4bit; training "
                                "with the Hugging Face libraries")
ALPACA_RECIPE = Source(title="Stanford Alpaca: an instruction-following LLaMA model",
                       url="https://github.com/tatsu-lab/stanford_alpaca#fine-tuning",
                       section="Fine-tuning (LLaMA-7B, full fine-tuning with the Trainer: batch size 128, learning rate "
                               "2e-5, 3 epochs; train command: --warmup_ratio 0.03)")
QLORA_RECIPE = Source(title="QLoRA repository: the Guanaco fine-tuning scripts",
                      url="https://github.com/artidoro/qlora/blob/main/scripts/finetune_guanaco_7b.sh",
                      section="--learning_rate 0.0002 for 7B (and 13B), 0.0001 in finetune_guanaco_33b.sh and "
                              "_65b.sh; --per_device_train_batch_size 4 x --gradient_accumulation_steps 4 on one GPU "
                              "(global batch 16); --warmup_ratio 0.03")
