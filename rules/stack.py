"""The software stack: attention kernel, loss kernel, padding-free packing, fp8 matmuls, bitsandbytes' version, the
model code (framework), and how CUDA loads its kernels.

The planner takes, for each layout, the first value of each stack setting that the rules allow and no rule
refuses (``Plan.attention`` etc.; values declared fastest first in :mod:`advisor.core.kernels`). A value whose package
is not installed here (or, for catalog GPUs, not known to be installed where the plan runs) is forbidden softly:
the plan runs with what transformers and torch give, and the recommendation prices the value it could not use
("flash-attention-2: not installed ... would take X GiB less and be Y % faster").
"""

from __future__ import annotations

from probes.cuda_stack import EAGER_CONTEXT_BYTES, LAZY_CONTEXT_BYTES
from advisor.core.kernels import (INSTALL, LIGER_MODEL_TYPES, STACK_PACKAGES, Attention, Framework, LossKernel,
                           legacy_bitsandbytes, loss_kept)
from advisor.core.units import GIB
from advisor.core.vocabulary import Method, Parallelism, Precision, Task, values
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


def pinned(rule: Rule, facts: Facts, setting: Setting) -> list[Effect] | None:
    """Forbid every value but the one the user asked for (``Workload``'s field), or None when nothing was asked."""
    asked = getattr(facts.workload, setting)
    if asked is None:
        return None
    choices = (True, False) if isinstance(asked, bool) else values(Attention if setting == Setting.ATTENTION
                                                                   else LossKernel)
    flag = "--" + str(setting).replace("_", "-")
    said = flag if asked is True else f"--no-{flag[2:]}" if asked is False else f"{flag} {asked}"
    return [rule.forbid(setting, v, f"{said} was asked for", pin=True) for v in choices if v != asked]


def package_missing(rule: Rule, facts: Facts, setting: Setting, value: str, package: str | None) -> Effect | None:
    """A soft forbid of a value whose package is not installed here (or not known to be, for catalog GPUs)."""
    if package is None or facts.packages.get(package):
        return None
    flag = "--" + str(setting).replace("_", "-")
    where = "is not installed here" if facts.packages.get(package) is False else "is not known to be installed " \
                                                                                 "where you train (--gpu)"
    install = INSTALL.get(package, f"pip install {STACK_PACKAGES[package]}")
    return rule.forbid(setting, value, f"needs {STACK_PACKAGES[package]}, which {where}: {install}, or say "
                                       f"{flag} {value}", package=package)


@register
class AttentionKernel(Rule):
    id = "stack.attention-kernel"
    title = "the fastest attention kernel the GPU, the precision and the installed packages allow"
    topic = "stack"
    sources = [S.FLASH_ATTENTION_2, S.FLASH_ATTENTION_3, S.TORCH_SDPA, S.HF_ATTENTION, S.HF_ATTENTION_SUPPORT]
    rationale = ("Eager attention materialises the s x s probabilities of every head and keeps them for backward; "
                 "fused kernels (FlashAttention, torch's SDPA) tile the computation in on-chip memory and keep "
                 "O(s). SDPA is in torch and dispatches to FlashAttention-2 kernels for fp16 / bf16 on Ampere and "
                 "newer (memory-efficient kernels otherwise); the flash-attn package's own kernels are a little "
                 "faster and attend within packed documents; FlashAttention-3 uses Hopper's asynchronous tensor "
                 "cores for 1.5-2x FlashAttention-2's speed on H100. Not every architecture has every kernel in "
                 "transformers: T5 adds a relative position bias to the scores and has no FlashAttention path, MPT, "
                 "BLOOM and DeBERTa-v2 run eager attention only; the model profile says which its class declares.")

    def propose(self, facts: Facts) -> list[Effect]:
        asked = pinned(self, facts, Setting.ATTENTION)
        gpu, effects = facts.gpu, asked or []
        fa2, fa3 = Attention.FLASH_ATTENTION_2, Attention.FLASH_ATTENTION_3
        if gpu is None:
            effects += [self.forbid(Setting.ATTENTION, a, "a CUDA kernel: the CPU has none", hard=True) for a in (fa2, fa3)]
            if not asked:
                effects.append(self.forbid(Setting.ATTENTION, Attention.SDPA, "on the CPU advisor plans eager "
                                           "attention, what its CPU memory model and trials were fitted to"))
            return effects
        for kernel in (fa3, fa2):
            spec = kernel.spec
            if gpu.cc < spec.min_cc or (spec.max_cc_major is not None and gpu.cc[0] > spec.max_cc_major):
                effects.append(self.forbid(Setting.ATTENTION, kernel, f"{kernel} needs compute capability "
                                           f"{spec.min_cc[0]}.{spec.min_cc[1]}"
                                           + (" (Hopper only)" if spec.max_cc_major else " or newer")
                                           + f"; this GPU has {gpu.compute_capability}", hard=True))
            elif (not asked and kernel in facts.model.attention_kernels
                  and (missing := package_missing(self, facts, Setting.ATTENTION, kernel, spec.package))):
                effects.append(missing)
        if not asked and Attention.SDPA in facts.model.attention_kernels:  # else eager is transformers' only kernel
            effects.append(self.forbid(Setting.ATTENTION, Attention.EAGER, "keeps the s x s scores of every head: "
                                       "more memory and slower than SDPA; only when asked for"))
        return effects

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if Attention.of(plan.attention).spec.half_only and plan.precision == Precision.FP32:
            return self.forbid(Setting.ATTENTION, plan.attention, "FlashAttention runs fp16 / bf16 only; this plan "
                                                                  "computes in fp32", hard=True)
        model = facts.model
        if plan.framework == Framework.TRANSFORMERS and plan.attention not in model.attention_kernels:
            implementation = Attention.of(plan.attention).spec.implementation
            return self.forbid(Setting.ATTENTION, plan.attention, f"transformers' {model.model_type} code has no "
                               f"{plan.attention} path (its class does not declare it: from_pretrained("
                               f"attn_implementation='{implementation}') raises); it runs "
                               f"{', '.join(model.attention_kernels)}", hard=True)
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        reasons = {Attention.FLASH_ATTENTION_3: "Hopper's fastest kernel (FlashAttention-3): O(s) memory",
                   Attention.FLASH_ATTENTION_2: "the flash-attn package's kernels: O(s) memory, packed documents",
                   Attention.SDPA: "torch's fused attention (no extra package): O(s) memory; FlashAttention-2 "
                                   "kernels for fp16 / bf16 on Ampere and newer",
                   Attention.EAGER: "the plain implementation: keeps the s x s scores"}
        return [self.set(Setting.ATTENTION, plan.attention, reasons[Attention.of(plan.attention)])]


@register
class LossKernelRule(Rule):
    id = "stack.loss-kernel"
    title = "Liger's fused kernels where installed and supported; the Trainer's loss otherwise"
    topic = "stack"
    sources = [S.LIGER_KERNEL, S.LIGER_PATCHING, S.TORCHTUNE_CHUNKED_CE, S.PT2_PAPER, S.LIGER_COMPILE]
    rationale = ("A causal LM's loss materialises batch x sequence x vocabulary logits, upcast to fp32 with their "
                 "log-softmax: for a 128k vocabulary that is more than all the layers' activations. Liger's fused "
                 "linear cross-entropy computes logits, loss and gradient chunk by chunk and never holds them "
                 "whole; its RMSNorm and SwiGLU kernels keep fewer tensors too (the paper: 60 % less memory and "
                 "20 % more throughput on Llama 3 8B). torchtune's chunked cross-entropy keeps the 16-bit logits "
                 "and upcasts one chunk at a time. The Trainer turns Liger on with use_liger_kernel=True; a loss "
                 "that needs the whole logits (distillation, a custom loss) keeps Liger's layers alone "
                 "(liger_kernel_config fused_linear_cross_entropy=False), whose logits cost what the Trainer's do. "
                 "transformers computes the loss in the model's forward, so torch.compile fuses it too: the upcast "
                 "and log-softmax become reductions over the 16-bit logits, which alone are saved.")

    def propose(self, facts: Facts) -> list[Effect]:
        asked = pinned(self, facts, Setting.LOSS_KERNEL)
        effects = asked or []
        lm = Task.of(facts.model.task) == Task.CAUSAL_LM
        if not lm:
            return effects + [self.forbid(Setting.LOSS_KERNEL, k, f"{k} fuses a causal LM's loss or layers; this "
                                          f"model's head is {facts.model.task}", hard=True)
                              for k in LossKernel if k != LossKernel.STANDARD]
        # values planned only when asked for: their stacks are not the Trainer's default one
        only_asked = {LossKernel.CHUNKED: "a torchtune / custom training loop's loss, not the Trainer's: say "
                                          f"--loss-kernel {LossKernel.CHUNKED} if your stack has it",
                      LossKernel.LIGER_LAYERS: "Liger's fused loss does what the Trainer's does without whole logits: "
                                               f"say --loss-kernel {LossKernel.LIGER_LAYERS} if your loss needs the "
                                               "logits"}
        for k in (k for k in LossKernel if k.spec.fused_layers):
            if facts.on_cpu:
                effects.append(self.forbid(Setting.LOSS_KERNEL, k, "Liger's kernels are Triton (CUDA) kernels",
                                           hard=True))
            elif facts.model.model_type not in LIGER_MODEL_TYPES:
                effects.append(self.forbid(Setting.LOSS_KERNEL, k, f"Liger does not patch "
                                           f"'{facts.model.model_type}' models", hard=True))
            elif not asked and k not in only_asked and (missing := package_missing(self, facts, Setting.LOSS_KERNEL,
                                                                                   k, k.spec.package)):
                effects.append(missing)
        if not asked:
            effects += [self.forbid(Setting.LOSS_KERNEL, k, reason) for k, reason in only_asked.items()]
        return effects

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        kernel = LossKernel.of(plan.loss_kernel)
        if kernel == LossKernel.STANDARD:
            fused = loss_kept(kernel, plan.torch_compile, plan.framework) != kernel.spec
            return [self.set(Setting.LOSS_KERNEL, kernel, "the Trainer's loss, compiled with the model: 16-bit "
                                                          "logits, the fp32 log-softmax fused" if fused else
                             "the Trainer's loss: full logits, fp32 log-softmax")]
        effects = [self.set(Setting.LOSS_KERNEL, kernel, {
            LossKernel.LIGER: "no vocabulary-sized fp32 logits: fused linear cross-entropy, RMSNorm, SwiGLU and RoPE "
                              "kernels (use_liger_kernel=True)",
            LossKernel.LIGER_LAYERS: "Liger's RMSNorm, SwiGLU and RoPE kernels, the Trainer's loss on whole logits "
                                     "(use_liger_kernel=True, liger_kernel_config fused_linear_cross_entropy=False)",
            LossKernel.CHUNKED: "16-bit logits, upcast one chunk at a time"}[kernel])]
        if kernel.spec.fused_layers and plan.torch_compile:
            effects.append(self.warn(
                "Liger's Triton kernels inside torch.compile: Inductor launches them unlike eager Triton, and some "
                "releases fail there (Liger-Kernel issue 174; liger-kernel 0.8.5 on torch 2.11: a compile error in "
                "its RMSNorm, then an illegal memory access): if the first steps fail, --no-torch-compile",
                setting=Setting.LOSS_KERNEL))
        return effects


@register
class Packing(Rule):
    id = "stack.packing"
    title = "padding-free packing when samples are shorter than the sequence length"
    topic = "stack"
    sources = [S.HF_PACKING_FA2, S.FLASH_ATTENTION_2, S.PACKING_KUNDU, S.PACKING_KRELL]
    rationale = ("Padding each batch to its longest sample (the collators' default) spends compute on pad tokens, "
                 "more as the batch grows (advisor takes sample lengths as exponential: the longest of b samples "
                 "averages H_b times the mean), and memory must hold a batch of seq_len rows. Padding-free packing "
                 "concatenates samples into full rows and passes position ids, so FlashAttention's variable-length "
                 "kernels attend within each sample (DataCollatorWithFlattening; up to 2x throughput in the "
                 "Hugging Face / IBM measurements) without cross-contamination. It needs FlashAttention (2 or 3); "
                 "batch sizes then count packed rows.")

    def propose(self, facts: Facts) -> list[Effect]:
        asked = pinned(self, facts, Setting.PACKING)
        if asked is not None:
            return asked
        w = facts.workload
        if w.mean_sample_len is None or w.mean_sample_len >= w.seq_len:
            return [self.forbid(Setting.PACKING, True, "samples fill seq_len (say --mean-sample-len if they are "
                                                       "shorter): nothing to pack")]
        return []

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if plan.packing and not Attention.of(plan.attention).spec.varlen:
            return self.forbid(Setting.PACKING, True, f"padding-free packing needs FlashAttention's variable-length "
                                                      f"kernels; {plan.attention} would attend across samples",
                               hard=True)
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        m, s = facts.workload.mean_sample_len, facts.workload.seq_len
        if not plan.packing:
            return []
        if m is None or m >= s:
            return [self.set(Setting.PACKING, True, "rows packed padding-free (DataCollatorWithFlattening); the samples "
                                                    "fill seq_len already, so no more useful tokens per row")]
        return [self.set(Setting.PACKING, True, f"samples of {m} tokens on average fill {s}-token rows: "
                                                f"{s / m:.1f}x the useful tokens per row (DataCollatorWithFlattening)")]


@register
class Fp8(Rule):
    id = "stack.fp8"
    title = "fp8 matmuls only when asked for, on Ada and Hopper"
    topic = "stack"
    sources = [S.TORCHAO_FLOAT8, S.TE_FP8, S.TORCHTITAN_H100_BENCH, S.ACCELERATE_FP8]
    rationale = ("Ada and Hopper tensor cores run fp8 at twice the bf16 rate. torchao's float8 training and "
                 "Transformer Engine cast the blocks' linear layers to fp8 with per-tensor scales (attention, "
                 "norms and the LM head stay in bf16), for 1.2-1.5x end-to-end on large models. It buys speed, "
                 "not memory: torchao keeps the bf16 weights and saves the layers' bf16 inputs for the backward "
                 "(torchtitan's Llama 3.1 8B on 8 H100s: 77.0 GiB with compile, 76.8 with Float8 too), so "
                 "advisor prices an fp8 plan's memory as bf16's (Transformer Engine's fp8 copies are not priced). "
                 "Scaling can diverge where bf16 would not, so advisor plans fp8 only when asked (--fp8) and names "
                 "its gain. --emit runs it the way accelerate does (mixed_precision: fp8 with the torchao backend: "
                 "every nn.Linear whose sizes divide by 16 but the model's first and last becomes a Float8Linear).")

    def propose(self, facts: Facts) -> list[Effect]:
        asked = pinned(self, facts, Setting.FP8)
        gpu = facts.gpu
        if gpu is None or not gpu.fp8:
            where = "the CPU" if gpu is None else f"compute capability {gpu.compute_capability}"
            return [self.forbid(Setting.FP8, True, f"fp8 tensor cores need Ada (8.9) or Hopper; {where} has none",
                                hard=True)]
        if asked is not None:
            return asked
        if facts.packages.get("torchao") is False and facts.packages.get("transformer_engine") is False:
            return [self.forbid(Setting.FP8, True, "needs torchao or transformer-engine, neither installed here")]
        return [self.forbid(Setting.FP8, True, "fp8 can diverge where bf16 does not: only when asked for (--fp8); "
                                               "validate the loss")]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not plan.fp8:
            return []
        return [self.warn("fp8: accelerate's torchao backend (--emit: mixed_precision fp8, fp8_config backend AO) "
                          "converts every nn.Linear whose sizes divide by 16 to Float8Linear but the first and the last "
                          "(the first block's first projection, the LM head); attention's matmuls, norms, embeddings "
                          "and the loss stay bf16: validate the loss curve", setting=Setting.FP8)]

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if plan.fp8 and (plan.precision != Precision.BF16 or Method.of(plan.method).spec.quantized_base):
            return self.forbid(Setting.FP8, True, "fp8 training recipes run under bf16 autocast over 16-bit weights "
                                                  "(not fp16, fp32 or a 4-bit base)", hard=True)
        return None



def installed_bitsandbytes(facts: Facts) -> str | None:
    """The bitsandbytes version installed where the plan runs: this machine's (None when absent, or when planning
    for catalog GPUs, whose software advisor does not know)."""
    return (facts.hardware.installed or {}).get("bitsandbytes")


def installed_legacy_bitsandbytes(facts: Facts) -> bool:
    """Whether the bitsandbytes installed where the plan runs keeps its 4-bit layers' inputs (older than 0.43.2)."""
    return legacy_bitsandbytes(installed_bitsandbytes(facts))


@register
class BitsandbytesBackward(Rule):
    id = "stack.bitsandbytes-backward"
    title = "QLoRA priced for the installed bitsandbytes; before 0.43.2 its 4-bit layers keep their inputs"
    topic = "stack"
    sources = [S.BNB_PR_1270, S.QLORA_PAPER]
    rationale = ("A 4-bit layer's backward needs only its weight: the input's gradient is the output's gradient "
                 "times the dequantized weight, and the frozen weight gets none. Until 0.43.2, bitsandbytes' "
                 "MatMul4Bit still kept its input for backward, one activation per 4-bit layer that PyTorch could "
                 "not free; and because it kept it outside save_for_backward, non-reentrant activation "
                 "checkpointing could not drop it either. PR 1270 removed it. advisor plans QLoRA for 0.43.2 and "
                 "later unless an older version is installed here (or --legacy-bitsandbytes is said).")

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not Method.of(plan.method).spec.quantized_base:
            return []
        version = installed_bitsandbytes(facts)
        if plan.legacy_bitsandbytes:
            said = f"bitsandbytes {version} is installed here" if legacy_bitsandbytes(version) else \
                "--legacy-bitsandbytes was said"
            return [self.warn(f"{said}: before 0.43.2 every 4-bit layer keeps its input for backward, even under "
                              f"activation checkpointing (priced so); pip install -U bitsandbytes frees it",
                              Setting.LEGACY_BITSANDBYTES)]
        if version is not None and legacy_bitsandbytes(version):
            return [self.warn(f"bitsandbytes {version} is installed here, but this plan is priced for 0.43.2 or "
                              f"later, whose 4-bit layers keep no input for backward: pip install -U bitsandbytes",
                              Setting.LEGACY_BITSANDBYTES)]
        return []


@register
class FrameworkRule(Rule):
    id = "stack.framework"
    title = ("plans are priced for transformers + PEFT; LitGPT's or Megatron-style code only when asked "
             "(estimate --framework)")
    topic = "stack"
    sources = [S.LITGPT, S.PEFT_LORA, S.TORCH_FSDP_NO_SYNC, S.ACTIVATION_MEMORY_PAPER, S.MEGATRON_DIST_OPTIMIZER]
    rationale = ("Which tensors a step keeps depends on the model code, not only on the model: LitGPT's own "
                 "implementation (fused qkv, its LoRA layers in the weights' dtype, bf16-true without autocast, a "
                 "chunked LM head and loss) keeps other activations than transformers' model wrapped by PEFT. advisor "
                 "plans, emits and trials the Hugging Face stack; estimate --framework litgpt prices LitGPT's step "
                 "with "
                 "columns fitted to simulated LitGPT steps, whose published peak memory they reproduce. Its loops "
                 "accumulate under fabric.no_backward_sync, FSDP's no_sync: the full gradients stay on every GPU "
                 "until the last micro-batch, for LoRA every block's (Fabric's use_orig_params=True wraps frozen "
                 "weights and adapters together). estimate --framework megatron prices Megatron-style fused layers "
                 "(Megatron-LM / Megatron-Core, NeMo, Transformer Engine, flash-attention's training GPT): a block "
                 "keeps 34sbh in 16 bits with dropout under FlashAttention (Korthikanti et al. sec. 4.1: norms keep "
                 "their input only, the fused bias-GeLU / SwiGLU its input), about half what the Hugging Face "
                 "models' unfused norms and activations keep, and Megatron's optimizer keeps fp32 gradients beside "
                 "16-bit parameters: 6 + 12/d bytes a parameter with the distributed optimizer, 18 without.")

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.framework == Framework.TRANSFORMERS:
            return []
        effects = [self.warn(f"priced for {Framework.of(plan.framework).label} (estimate only): --emit writes "
                             "the Trainer's recipe, and trials and --simulate run transformers' model",
                             Setting.FRAMEWORK)]
        if (plan.framework == Framework.LITGPT and Parallelism.of(plan.parallelism).fsdp
                and plan.gradient_accumulation_steps > 1):
            what = "every block's weights (frozen ones too: LoRA shares their FSDP units)" if Method.of(
                plan.method).spec.adapters else "every weight"
            effects.append(self.warn(
                f"LitGPT accumulates its {plan.gradient_accumulation_steps} micro-batches under FSDP's no_sync: each "
                f"GPU holds an unsharded gradient of {what} until the last one; fewer, larger micro-batches "
                "shorten that", Setting.GRADIENT_ACCUMULATION_STEPS))
        return effects


@register
class CudaModuleLoading(Rule):
    id = "stack.cuda-module-loading"
    title = "the CUDA context: about 0.5 GiB per GPU with lazy module loading, 1.3 GiB without"
    topic = "stack"
    sources = [S.CUDA_LAZY_LOADING, S.TORCH_LAZY_LOADING, S.HF_ANATOMY]
    rationale = ("Each training process holds device memory outside torch's allocator: the CUDA context and the "
                 "kernels loaded into it. Loaded eagerly, every kernel of torch, cuBLAS and cuDNN comes in at "
                 "start-up: the HF guide measured 1343 MB on a V100 before any tensor of the model (CUDA 11.2). "
                 "CUDA 11.7 added lazy loading (each kernel on first use; a driver of R515 or newer), torch 1.13 "
                 "turns it on when CUDA_MODULE_LOADING is unset, and CUDA 12.2 makes it the default: the bare "
                 "context then takes a few hundred MB. advisor prices the context by the CUDA version "
                 "(--cuda-version; the local torch build when probing), or as measured or given (--cuda-context).")

    def propose(self, facts: Facts) -> list[Effect]:
        hardware = facts.hardware
        if facts.gpu is None or hardware.cuda_context_bytes:
            return []
        loading = hardware.module_loading
        if loading.lazy:
            return []
        more = (EAGER_CONTEXT_BYTES - LAZY_CONTEXT_BYTES) / GIB
        return [self.warn(f"{loading.why}: every kernel loads at start-up and the CUDA context takes "
                          f"{EAGER_CONTEXT_BYTES / GIB:.1f} GiB of each GPU, {more:.1f} GiB more than lazily (priced "
                          f"so); {loading.fix}")]
