"""The software stack's vocabulary: attention kernels, loss kernels and checkpointing policies, with their facts.

The values a plan's stack settings take (``Plan.attention``, ``Plan.loss_kernel``) and the optional
packages whose presence the probes report, spelled once here beside :mod:`advisor.core.vocabulary` (which keeps
the other dimensions; this module follows its conventions: a :class:`~advisor.core.vocabulary.Vocabulary`
enum and a spec table). The rules that decide them are in ``rules/stack.py``; the memory and speed
models read the specs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from advisor.core.vocabulary import Device, Vocabulary


@dataclass(frozen=True)
class AttentionSpec:
    """What one attention implementation needs and keeps.

    ``efficiency``: the fraction of the GPU's 16-bit tensor-core peak its forward + backward reach on long
    sequences, by compute-capability major (missing: the plan's matmul efficiency, what eager's batched GEMMs
    get). Sources: FlashAttention-2 (Dao 2023, https://arxiv.org/abs/2307.08691 sec. 4.1, fig. 4-7: forward +
    backward 176-203 TFLOP/s on A100 = 0.56-0.65 of 312; on H100 about 335 of 989); FlashAttention-3 (Shah et
    al. 2024, https://arxiv.org/abs/2407.08608 sec. 4.1: forward 740 TFLOP/s = 75 %, backward 1.5-1.75x
    FlashAttention-2's, so forward + backward about 0.5 of 989). SDPA dispatches to FlashAttention-2 kernels for
    fp16 / bf16 on compute capability 8.0 and newer, and to the memory-efficient (CUTLASS) kernel otherwise
    (PyTorch, "torch.nn.functional.scaled_dot_product_attention", https://pytorch.org/docs/stable/generated/
    torch.nn.functional.scaled_dot_product_attention.html).
    """

    implementation: str  #: transformers' ``attn_implementation``
    package: str | None = None  #: the module that must import (None: in torch)
    min_cc: tuple[int, int] = (0, 0)  #: least compute capability of the CUDA kernel
    max_cc_major: int | None = None  #: FlashAttention-3 is built for Hopper (sm90) only
    half_only: bool = False  #: fp16 / bf16 inputs only
    keeps_scores: bool = False  #: the s x s probabilities are materialised and saved for backward
    varlen: bool = False  #: attends within packed documents (position ids / cu_seqlens): padding-free packing
    efficiency: tuple[tuple[int, float], ...] = ()  #: (cc major, fraction of 16-bit peak), forward + backward


class Attention(Vocabulary):
    """The attention implementation (transformers' ``attn_implementation``), fastest first."""

    FLASH_ATTENTION_3 = "flash-attention-3"  #: FlashAttention-3 (Hopper): warp-specialised, asynchronous
    FLASH_ATTENTION_2 = "flash-attention-2"  #: the flash-attn package's kernels (Ampere and newer)
    SDPA = "sdpa"  #: torch scaled_dot_product_attention: flash / memory-efficient kernels on CUDA
    EAGER = "eager"  #: the s x s probabilities materialised (and saved for backward)

    @property
    def spec(self) -> AttentionSpec:
        return ATTENTION_SPECS[self]

    @staticmethod
    def default(device: str) -> Attention:
        """transformers' default on CUDA (SDPA); eager on the CPU, what the memory model was fitted to there."""
        return Attention.SDPA if device == Device.CUDA else Attention.EAGER


_FA2_EFFICIENCY = ((8, 0.58), (9, 0.34))
ATTENTION_SPECS: dict[Attention, AttentionSpec] = {
    Attention.FLASH_ATTENTION_3: AttentionSpec(
        "flash_attention_3", "flash_attn_interface", (9, 0), 9, True, varlen=True, efficiency=((9, 0.50),)
    ),
    Attention.FLASH_ATTENTION_2: AttentionSpec(
        "flash_attention_2", "flash_attn", (8, 0), half_only=True, varlen=True, efficiency=_FA2_EFFICIENCY
    ),
    Attention.SDPA: AttentionSpec("sdpa", efficiency=_FA2_EFFICIENCY + ((7, 0.30),)),
    Attention.EAGER: AttentionSpec("eager", keeps_scores=True),
}


#: Closed-form model types (``probes/architectures.py``) whose transformers modelling code has no FlashAttention path:
#: T5 adds its relative position bias to the attention scores (``_supports_flash_attn = False`` in transformers 5.24's
#: ``models/t5/modeling_t5.py``). Every closed-form type but :data:`NO_SDPA_ATTENTION_TYPES` runs SDPA. Other model types are read from their class
#: (:func:`supported_attention`, ``probes/meta_count.py``).
NO_FLASH_ATTENTION_TYPES = frozenset({"t5"})
#: Closed-form model types whose transformers class has no SDPA path: Gemma 2 soft-caps its attention logits, which
#: SDPA cannot (``_supports_sdpa = False  # sdpa does not support softcapping`` in transformers 5.24's
#: ``models/gemma2/modeling_gemma2.py``); eager and FlashAttention (its ``softcap`` argument) can.
NO_SDPA_ATTENTION_TYPES = frozenset({"gemma2"})


def closed_form_attention(model_type: str) -> list[str]:
    """The attention implementations (:func:`supported_attention`) of a closed-form model type's transformers class:
    SDPA but for :data:`NO_SDPA_ATTENTION_TYPES`, FlashAttention but for :data:`NO_FLASH_ATTENTION_TYPES`."""
    return supported_attention(
        sdpa=model_type not in NO_SDPA_ATTENTION_TYPES, flash=model_type not in NO_FLASH_ATTENTION_TYPES
    )


def supported_attention(sdpa: bool, flash: bool) -> list[str]:
    """The attention implementations a transformers model class runs (:class:`Attention` values, best first): eager
    always, SDPA where the class declares ``_supports_sdpa``, FlashAttention-2 and -3 where it declares
    ``_supports_flash_attn`` (``_supports_flash_attn_2`` before transformers 5). Anything else makes
    ``from_pretrained(attn_implementation=...)`` raise "does not support ... yet" (transformers docs, "GPU
    inference": the architectures with FlashAttention-2 and with SDPA,
    https://huggingface.co/docs/transformers/v4.49.0/perf_infer_gpu_one)."""
    flash_kernels = (Attention.FLASH_ATTENTION_3, Attention.FLASH_ATTENTION_2)
    return [
        a.value
        for a in Attention
        if a == Attention.EAGER or (a == Attention.SDPA and sdpa) or (a in flash_kernels and flash)
    ]


@dataclass(frozen=True)
class LossKernelSpec:
    """What one loss implementation keeps of the vocabulary-sized logits, and what it needs.

    ``logit_bytes``: bytes per logit (tokens x vocabulary) held at the end of the forward pass: the Trainer's
    loss keeps the 16-bit logits, their fp32 upcast and fp32 log-softmax (10 B under mixed precision);
    chunked cross-entropy upcasts one chunk at a time and keeps the 16-bit logits (2 B; torchtune
    ``CEWithChunkedOutputLoss``, https://pytorch.org/torchtune/stable/generated/torchtune.modules.loss.
    CEWithChunkedOutputLoss.html); Liger's fused linear cross-entropy never materialises the logits: it computes
    them, the loss and the hidden state's gradient chunk by chunk in the forward (Hsu et al. 2024,
    https://arxiv.org/abs/2410.10989 sec. 3.2), about 0. Liger's layers without that loss keep what the standard
    loss keeps.
    """

    logit_bytes: float  #: bytes per logit kept to the end of the forward pass under mixed precision
    logit_bytes_fp32: float  #: the same in fp32 (the standard loss: fp32 logits + log-softmax)
    grad_logits: bool = True  #: the backward starts from a logits-sized gradient (not Liger: done in the forward)
    package: str | None = None  #: the module that must import
    fused_layers: bool = False  #: also RMSNorm, SwiGLU / GeGLU and RoPE kernels (Liger), not the loss alone
    #: Liger's switches that differ from its defaults: the keyword arguments of ``_apply_liger_kernel_to_instance``,
    #: the Trainer's ``liger_kernel_config`` (transformers ``TrainingArguments``)
    liger_config: tuple[tuple[str, bool], ...] = ()


class LossKernel(Vocabulary):
    """How the language-modelling loss is computed."""

    STANDARD = "standard"  #: the Trainer's: full logits, fp32 upcast and log-softmax
    CHUNKED = "chunked"  #: chunked cross-entropy (torchtune, flash-attn's fused loss): 16-bit logits only
    LIGER = "liger"  #: Liger-Kernel: fused linear cross-entropy, RMSNorm, SwiGLU, RoPE (use_liger_kernel=True)
    #: Liger's RMSNorm, SwiGLU / GeGLU and RoPE kernels with the model's own loss on whole logits (Liger's
    #: ``fused_linear_cross_entropy=False``: a loss that needs the logits, e.g. distillation, or NeMo AutoModel's recipes)
    LIGER_LAYERS = "liger-layers"

    @property
    def spec(self) -> LossKernelSpec:
        return LOSS_KERNEL_SPECS[self]


LOSS_KERNEL_SPECS: dict[LossKernel, LossKernelSpec] = {
    LossKernel.STANDARD: LossKernelSpec(10.0, 8.0),
    LossKernel.CHUNKED: LossKernelSpec(2.0, 4.0),
    LossKernel.LIGER: LossKernelSpec(0.0, 0.0, grad_logits=False, package="liger_kernel", fused_layers=True),
    LossKernel.LIGER_LAYERS: LossKernelSpec(
        10.0,
        8.0,
        package="liger_kernel",
        fused_layers=True,
        liger_config=(("fused_linear_cross_entropy", False), ("cross_entropy", False)),
    ),
}


class Checkpointing(Vocabulary):
    """What activation checkpointing keeps and recomputes, when ``gradient_checkpointing`` is on.

    Full checkpointing keeps each block's input and recomputes the block in the backward (``torch.utils.checkpoint``
    around every block: the HF Trainer's ``gradient_checkpointing``). Selective checkpointing (Korthikanti et al.
    2022, https://arxiv.org/abs/2205.05198 sec. 5, recompute only what is cheap) as torchtitan runs it
    (``activation_checkpoint.mode = "selective"``, ``torchtitan/distributed/activation_checkpoint.py``; earlier
    ``torchtitan/parallelisms/parallelize_llama.py``): op-level keeps the outputs of attention and of every other
    matmul of a block (its ``_save_list`` policy: the 1st, 3rd, ... ``aten.mm`` of each block) and recomputes the
    rest;
    layer-level checkpoints every second block (``selective_ac_option = "2"``) and keeps everything of the
    others. The HF Trainer runs full checkpointing only; selective needs torchtitan, torchtune (``ac_mode``) or
    ``torch.utils.checkpoint.create_selective_checkpoint_contexts`` in your own loop."""

    FULL = "full"  #: every block from its input
    SELECTIVE_OP = "selective-op"  #: keeps attention's and every other matmul's output (torchtitan's op-level SAC)
    SELECTIVE_LAYER = "selective-layer"  #: every second block checkpointed, the others keep everything

    @property
    def selective(self) -> bool:
        """Anything but full checkpointing (which the HF Trainer cannot run)."""
        return self is not Checkpointing.FULL


class Framework(Vocabulary):
    """The training code whose tensors a plan is priced for: the Hugging Face stack (transformers' model + PEFT's
    adapters, the Trainer's loop: what ``--emit`` writes, trials and ``--simulate`` run), or LitGPT's own model,
    LoRA layers and loops (https://github.com/Lightning-AI/litgpt: bf16-true, a chunked LM head and loss; its
    activation columns are fitted to simulated LitGPT 0.4.12 steps, ``benchmarks/calibrate_litgpt.py``), or
    Megatron-style fused transformer layers (Megatron-LM / Megatron-Core and what is built on it: NeMo, Transformer
    Engine's layers; flash-attention's training GPT): every block keeps what Korthikanti et al. 2022 count,
    https://arxiv.org/abs/2205.05198 sec. 4.1 (norms their input only, a fused bias-GeLU / SwiGLU its input, softmax
    in 16 bits), and gradients accumulate in an fp32 buffer beside 16-bit parameters (Megatron Core "Distributed
    Optimizer", https://docs.nvidia.com/megatron-core/developer-guide/latest/distrib_optimizer.html: 6 + 12/d bytes a
    parameter with the distributed optimizer, 18 without)."""

    TRANSFORMERS = "transformers"
    LITGPT = "litgpt"
    MEGATRON = "megatron"

    @property
    def label(self) -> str:
        """What the plan is priced for, in words (the rules' messages)."""
        return FRAMEWORK_LABELS[self]


FRAMEWORK_LABELS = {
    Framework.TRANSFORMERS: "transformers' model with PEFT's adapters and the Trainer's loop",
    Framework.LITGPT: "LitGPT's own model code and loops",
    Framework.MEGATRON: "Megatron-style fused layers and optimizer (Megatron-Core, NeMo)",
}


#: The loss kernels that leave the loss to the model (transformers' ``loss_function`` in its ``forward``): the standard
#: loss, and Liger's layers without its fused loss
MODEL_LOSS = frozenset({LossKernel.STANDARD, LossKernel.LIGER_LAYERS})


def loss_kept(loss_kernel: str, torch_compile: bool, framework: str) -> LossKernelSpec:
    """What a plan's loss keeps of the logits as it runs: its kernel's :class:`LossKernelSpec`, except the model's own
    loss (:data:`MODEL_LOSS`) compiled with the model, which keeps what chunked cross-entropy keeps (2 B a logit, 4
    in fp32).

    transformers computes a model's loss in its ``forward`` (``self.loss_function``: ``ForCausalLMLoss`` in
    ``transformers/loss/loss_utils.py`` upcasts the logits and calls ``cross_entropy``), so ``torch.compile(model)``,
    the Trainer's ``torch_compile=True`` and advisor's trials, compiles the loss too. Inductor then fuses the fp32
    upcast, log-softmax and NLL into reductions over the 16-bit logits, and AOTAutograd's min-cut partitioner
    saves those logits with each row's max and log-sum-exp and recomputes the softmax in the backward (Ansel et
    al. 2024, https://pytorch.org/assets/pytorch2-2.pdf sec. 4.3, "recompute pointwise ops, save the smallest cut").
    Measured with torch 2.13's Inductor on the CPU: the Trainer's loss saves 8.0 B a logit for the backward
    eagerly, 2.0 compiled (``tests/engine/test_stack.py::test_a_compiled_loss_saves_the_16_bit_logits_only``).
    torchtitan compiles its loss with the model since April 2025 (``torchtitan/components/loss.py``,
    ``build_cross_entropy_loss``); its December 2024 code did not ("compiling loss function causes CUDA errors").
    LitGPT's and Megatron's losses run outside a compiled model (their frameworks keep their own columns).

    Raises ValueError for an unknown loss kernel or framework name.
    """
    kernel = LossKernel.of(loss_kernel)
    if kernel in MODEL_LOSS and torch_compile and Framework.of(framework) == Framework.TRANSFORMERS:
        chunked = LOSS_KERNEL_SPECS[LossKernel.CHUNKED]
        return replace(kernel.spec, logit_bytes=chunked.logit_bytes, logit_bytes_fp32=chunked.logit_bytes_fp32)
    return kernel.spec


#: Model types Liger-Kernel patches (``liger_kernel.transformers.monkey_patch``, MODEL_TYPE_TO_APPLY_LIGER_FN:
#: https://github.com/linkedin/Liger-Kernel/blob/main/src/liger_kernel/transformers/monkey_patch.py).
LIGER_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "gemma",
        "gemma2",
        "gemma3",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "phi3",
        "granite",
        "olmo2",
        "mllama",
    }
)

#: Model types whose transformers code runs the tanh GELU in Python by default (``activation_function`` /
#: ``hidden_act`` "gelu_new": ``transformers/activations.py`` ``NewGELUActivation``, 0.5·x·(1 + tanh(√(2/π)·(x +
#: 0.044715·x³))) op by op), for which autograd saves three tensors of the MLP's width beside its input (the tanh's
#: output, 0.5·x and 1 + tanh): GPT-2, GPT-Neo, GPT-J, CodeGen, Phi-1/2. The other families' code runs one GELU kernel
#: that keeps its input only (``F.gelu`` / ``nn.GELU``: MPT's ``MptMLP``, GPT-NeoX, Falcon, BERT; BLOOM's
#: ``GeLUFunction`` saves its input), or SiLU (the gated MLPs).
PYTHON_GELU_MODEL_TYPES = frozenset({"gpt2", "gpt_neo", "gptj", "codegen", "phi"})

#: Optional packages the probes report (import name → distribution name): what makes a plan value runnable here.
STACK_PACKAGES = {
    "flash_attn": "flash-attn",
    "flash_attn_interface": "flash-attn-3",
    "liger_kernel": "liger-kernel",
    "transformer_engine": "transformer-engine",
    "torchao": "torchao",
    "bitsandbytes": "bitsandbytes",
    "deepspeed": "deepspeed",
    "peft": "peft",
    "trl": "trl",
}
#: How to install a package that pip cannot (FlashAttention-3 is built from the flash-attention repository's hopper/
#: folder: https://github.com/Dao-AILab/flash-attention#flashattention-3-beta-release).
INSTALL = {"flash_attn_interface": "build flash-attention's hopper/ folder (python setup.py install)"}


#: The first bitsandbytes release whose 4-bit layers keep no input for backward: 0.43.2 (2024-07-23), with PR 1270
#: ("fix QLoRA mem bug: delete useless buffered activation",
#: https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1270). Older ``MatMul4Bit`` kept ``(A, B)``.
BNB_DROPS_INPUTS = (0, 43, 2)


def legacy_bitsandbytes(version: str | None) -> bool:
    """Whether the bitsandbytes ``version`` (e.g. '0.42.0', as :func:`installed_packages` reports it) is older than
    :data:`BNB_DROPS_INPUTS`; False when it is None or not a release number ('?')."""
    parts = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if parts is None:
        return False
    return tuple(int(p or 0) for p in parts.groups()) < BNB_DROPS_INPUTS
