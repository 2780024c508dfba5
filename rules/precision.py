"""Precision: fp32, fp16 or bf16 mixed precision, and TF32."""

from __future__ import annotations

from probes.model import FP16_OVERFLOW_TYPES
from advisor.core.vocabulary import Method, Penalty, Precision, WeightsDtype
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


@register
class Bf16OnAmpere(Rule):
    id = "precision.bf16-on-ampere"
    title = "bf16 mixed precision on compute capability 8.0 and newer"
    topic = "precision"
    sources = [S.HF_BF16, S.CUDA_CC]
    rationale = (
        "Ampere and newer GPUs run bf16 on tensor cores at the fp16 rate; bf16 has fp32's range, "
        "so no loss scaling is needed and overflow is rare. fp32 stays a fallback for when the 16-bit "
        "weight copies of mixed precision do not fit."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is None or not gpu.bf16:
            return []
        return [
            self.prefer(
                Setting.PRECISION,
                Precision.BF16,
                f"compute capability {gpu.compute_capability} has native bf16: fp16 speed with fp32 range, "
                "no loss scaling",
            ),
            self.fallback(
                Setting.PRECISION,
                Precision.FP32,
                "gives up the tensor cores' 16-bit rate: only when mixed precision's 16-bit weight "
                "copies (2 B/param) are what does not fit",
                penalty=Penalty.MUCH_SLOWER,
            ),
        ]


@register
class NoBf16BeforeAmpere(Rule):
    id = "precision.no-bf16-before-ampere"
    title = "no bf16 below compute capability 8.0"
    topic = "precision"
    sources = [S.HF_BF16, S.CUDA_CC]
    rationale = (
        "bf16 tensor-core math arrived with Ampere (cc 8.0). On V100 and T4 bf16 is emulated, "
        "so torch.cuda.is_bf16_supported() saying True there does not make it fast."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is None or gpu.bf16:
            return []
        return [
            self.forbid(
                Setting.PRECISION,
                Precision.BF16,
                f"{gpu.name} (compute capability {gpu.compute_capability}) has no native bf16: "
                "it would be emulated, without tensor-core speed-up",
            )
        ]


@register
class Fp16OnVoltaTuring(Rule):
    id = "precision.fp16-on-volta-turing"
    title = "fp16 mixed precision with loss scaling on Volta/Turing tensor cores"
    topic = "precision"
    sources = [S.HF_FP16, S.NV_AMP, S.MIXED_PRECISION_PAPER]
    rationale = (
        "Volta and Turing tensor cores run fp16 several times faster than fp32 (the HF guide measures "
        "bert-large about twice as fast on a V100); fp16's narrow range needs dynamic loss scaling."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is None or not gpu.tensor_cores or gpu.bf16:
            return []
        return [
            self.prefer(
                Setting.PRECISION,
                Precision.FP16,
                f"{gpu.name} has tensor cores (generation {gpu.tensor_core_generation}) for fp16 "
                "but no bf16: fp16 mixed precision with loss scaling",
            ),
            self.fallback(
                Setting.PRECISION,
                Precision.FP32,
                "gives up the tensor cores' fp16 rate: only when mixed precision's 16-bit weight "
                "copies (2 B/param) are what does not fit",
                penalty=Penalty.MUCH_SLOWER,
            ),
        ]


@register
class Fp16NeedsLossScaling(Rule):
    id = "precision.fp16-needs-loss-scaling"
    title = "fp16 needs dynamic loss scaling; bf16 and fp32 need none"
    topic = "precision"
    sources = [S.MIXED_PRECISION_PAPER, S.TORCH_AMP, S.HF_BF16]
    rationale = (
        "Small fp16 gradients underflow to zero; scaling the loss (torch.amp.GradScaler) keeps them "
        "representable. bf16 shares fp32's exponent range, so it needs no scaling."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.precision == Precision.FP16:
            return [
                self.set(
                    Setting.LOSS_SCALING,
                    "dynamic",
                    "fp16 gradients underflow without it: torch.amp.GradScaler (the Trainer's fp16=True does this)",
                )
            ]
        return [self.set(Setting.LOSS_SCALING, "none", f"{plan.precision} has fp32's exponent range: no loss scaling")]


@register
class Fp32WithoutTensorCores(Rule):
    id = "precision.fp32-without-tensor-cores"
    title = "fp32 where there are no tensor cores"
    topic = "precision"
    sources = [S.NV_AMP, S.TORCH_AMP]
    rationale = (
        "Mixed precision is fast because tensor cores run 16-bit matmuls; without them (pre-Volta GPUs, "
        "CPUs without AMX) it saves some activation memory but gains no speed, and CPU autocast supports "
        "bf16 only. On CPUs with AVX-512 BF16 but no AMX, oneDNN's bf16 matmuls measured slower than "
        "fp32's (advisor validate on a Xeon with avx512_bf16: 154 vs 286 GFLOP/s; a gpt2 step 0.82x as fast); "
        "with neither, bf16 is converted around every matmul (a Xeon with AVX-512 alone: 35-60 vs "
        "194-211 GFLOP/s; a gpt2 step 0.49x as fast)."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is not None:
            if gpu.tensor_cores:
                return []
            why = f"{gpu.name} (compute capability {gpu.compute_capability}) has no tensor cores"
            return [
                self.forbid(Setting.PRECISION, Precision.FP16, why),
                self.forbid(Setting.PRECISION, Precision.BF16, why),
            ]
        flags = set(facts.hardware.host.cpu_flags) if facts.hardware.host else set()
        effects = [
            self.forbid(
                Setting.PRECISION,
                Precision.FP16,
                "training on the CPU: CPU autocast gains nothing from fp16",
                hard=True,
            )
        ]
        if "amx_bf16" in flags:
            effects.append(
                self.prefer(
                    Setting.PRECISION,
                    Precision.BF16,
                    "this CPU has AMX tiles: bf16 autocast runs matmuls several times faster than fp32",
                )
            )
        elif "avx512_bf16" not in flags:
            effects.append(
                self.forbid(
                    Setting.PRECISION,
                    Precision.BF16,
                    "training on a CPU without AMX or AVX-512 bf16 instructions: bf16 runs about half as fast as fp32",
                )
            )
        # AVX-512 BF16 without AMX: allowed, not preferred; bf16 saves activation memory but a gpt2 step
        # ran 0.82x as fast as fp32 (advisor validate, benchmarks/results/validate_cpu.md), so the speed
        # model ranks fp32 first unless memory needs bf16
        return effects


@register
class Tf32OnAmpere(Rule):
    id = "precision.tf32-on-ampere"
    title = "TF32 on Ampere and newer, also beside bf16"
    topic = "precision"
    sources = [S.HF_TF32, S.NV_TF32, S.TORCH_TF32]
    rationale = (
        "TF32 runs fp32 matmuls on tensor cores (up to 3x throughput, same convergence per NVIDIA); "
        "under bf16 autocast it still speeds the matmuls that stay in fp32."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is None or not gpu.tf32:
            return []
        return [
            self.prefer(
                Setting.TF32,
                True,
                f"compute capability {gpu.compute_capability} has TF32 tensor cores: fp32 matmuls up to 3x "
                "faster; helps beside bf16 too",
            )
        ]


@register
class NoTf32BeforeAmpere(Rule):
    id = "precision.no-tf32-before-ampere"
    title = "no TF32 below compute capability 8.0 or on the CPU"
    topic = "precision"
    sources = [S.HF_TF32, S.TORCH_TF32]
    rationale = "TF32 is an Ampere tensor-core mode; elsewhere the flag does nothing."

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is not None and gpu.tf32:
            return []
        where = "the CPU" if gpu is None else f"{gpu.name} (compute capability {gpu.compute_capability})"
        return [
            self.forbid(Setting.TF32, True, f"{where} has no TF32 tensor cores: the flag would do nothing", hard=True)
        ]


@register
class Bf16PretrainedNoFp16(Rule):
    id = "precision.bf16-pretrained-no-fp16"
    title = "fp16 for a model pretrained in bf16 only as a fallback, validated; never for T5"
    topic = "precision"
    sources = [S.HF_BF16, S.T5_FP16_OVERFLOW]
    rationale = (
        "A model pretrained in bf16 (T5, Llama 3, Mistral, ...) may have activations beyond fp16's 65504: "
        "the HF guide says it is likely to have overflow issues, not that it cannot train. fp16 is a "
        "fallback with a warning to validate (a non-finite loss shows it at once); where the overflow is "
        "documented (the T5 family: NaN losses under fp16) it is refused."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        model = facts.model
        if not model.pretrained_in_bf16:
            return []
        if model.model_type in FP16_OVERFLOW_TYPES:
            effects = [
                self.forbid(
                    Setting.PRECISION,
                    Precision.FP16,
                    f"{model.id} ({model.model_type}) overflows in fp16: documented NaN losses",
                )
            ]
        else:
            effects = [
                self.fallback(
                    Setting.PRECISION,
                    Precision.FP16,
                    f"{model.id} was pretrained in bf16: fp16 (max 65504) may overflow; only when bf16 "
                    "is unavailable, and validated",
                    penalty=Penalty.MUCH_SLOWER,
                )
            ]
        gpu = facts.gpu
        if gpu is not None and not gpu.bf16:
            effects.append(
                self.warn(
                    f"{model.id} was pretrained in bf16 and {gpu.name} has no bf16: a GPU of compute "
                    "capability >= 8.0 would allow bf16"
                )
            )
        return effects

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not facts.model.pretrained_in_bf16 or plan.precision != Precision.FP16:
            return []
        return [
            self.warn(
                "fp16 on a model pretrained in bf16 may overflow: run `advisor validate` (it retries a "
                "non-finite loss) and watch the loss scale in the first steps",
                setting=Setting.PRECISION,
            )
        ]


@register
class MixedPrecisionSmallBatchMemory(Rule):
    id = "precision.mixed-precision-small-batch-memory"
    title = "mixed precision keeps the weights twice: at small batches it can cost memory"
    topic = "precision"
    sources = [S.HF_FP16, S.HF_ANATOMY]
    rationale = (
        "Mixed precision holds fp32 master weights and 16-bit copies (6 bytes per parameter instead of 4); "
        "it saves memory only on activations, so below a micro-batch of about 8 it can use more memory "
        "than fp32. Its gain is speed."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if (
            plan.precision == Precision.FP32
            or plan.micro_batch_size >= 8
            or plan.weights_dtype != WeightsDtype.FP32
            or plan.method != Method.FULL
        ):
            return []
        return [
            self.warn(
                f"{plan.precision} mixed precision keeps fp32 weights plus 16-bit copies (6 B/parameter): "
                f"at micro-batch {plan.micro_batch_size} it saves little or no memory; it is chosen for speed",
                setting=Setting.PRECISION,
            )
        ]
