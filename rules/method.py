"""What is trained: every weight, or LoRA / QLoRA adapters; weights in fp32 (AMP masters) or pure bf16."""

from __future__ import annotations

from probes.adapters import (adapter_full_rank, adapter_parameters, frozen_base_bytes,
                             unquantized_expert_bytes)
from advisor.core.errors import UsageError
from advisor.core.kernels import Framework
from probes.lora_config import target_modules
from advisor.core.vocabulary import (LoraTargets, Method, Offload, Optimizer, Parallelism, Penalty, Precision,
                                   WeightsDtype)
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan
from rules.adapter_notes import adapters_warning, experts_note

_ADAPTERS = [Method.LORA.value, Method.QLORA.value]
#: Why each choice of adapted layers (``--lora-targets``), as the recommendation says it.
TARGETS_REASONS = {
    LoraTargets.ALL_LINEAR: "every linear layer of the blocks: what matches full fine-tuning (QLoRA sec. 4)",
    LoraTargets.ATTENTION: "the attention projections q, k, v, o (LoRA sec. 7.1); all-linear trains more and matches "
                           "full fine-tuning more closely",
    LoraTargets.QUERY_VALUE: "the query and value projections only, PEFT's default for Llama-style models (LoRA sec. "
                             "7.1: the best split of a small budget); the fewest adapters, but QLoRA sec. 4 needed "
                             "every linear layer (all-linear) to match full fine-tuning",
}


@register
class AdaptersWhenFullDoesNotFit(Rule):
    id = "method.adapters-when-full-does-not-fit"
    title = "full fine-tuning when it fits without a heavy fallback; LoRA, then QLoRA, when it does not"
    topic = "method"
    sources = [S.LORA_PAPER, S.QLORA_PAPER, S.LORA_LEARNS_LESS, S.PEFT_LORA, S.FSDP_QLORA,
               S.PEFT_TARGET_PARAMETERS]
    rationale = ("LoRA freezes the model and trains low-rank adapters (r·(d_in + d_out) per layer): no gradients or "
                 "optimizer states for the base, so a 7B model fine-tunes on a 24 GB card; QLoRA also stores the frozen"
                 " base in 4-bit NF4 (a 65B model on one 48 GB GPU). They train adapters, not the model: on instruction"
                 " tuning they match full fine-tuning when every linear layer has adapters (QLoRA sec. 4-5), but they "
                 "learn less new knowledge in long continued pre-training (Biderman et al. 2024). So full fine-tuning "
                 "wins whenever it fits with light fallbacks (checkpointing, bf16 weights, 8-bit states); adapters come"
                 " before offloading the optimizer to the CPU. QLoRA's NF4 with double quantization matched 16-bit LoRA"
                 " (QLoRA sec. 4), so QLoRA is weighed as LoRA plus one light fallback: a QLoRA plan without "
                 "checkpointing wins over a LoRA plan that needs it when it is faster. Under adapters only the frozen "
                 "base is worth offloading: FSDP's CPU offload keeps its shards in CPU RAM and fetches a block at a "
                 "time, which is how Answer.AI trains a 70B QLoRA on two 24 GB GPUs.")

    def propose(self, facts: Facts) -> list[Effect]:
        w = facts.workload
        if w.from_scratch:
            why = "pre-training from random weights trains every weight: adapters over a random base learn nothing useful"
            return [self.forbid(Setting.METHOD, m, why, hard=True) for m in _ADAPTERS]
        if w.method is not None:
            return [self.forbid(Setting.METHOD, m.value, f"--method {w.method} was asked for", pin=True)
                    for m in Method if m != w.method]
        if facts.model.quantization is not None:  # the checkpoint decides (method.pre-quantized-checkpoint)
            return []
        effects = [self.prefer(Setting.METHOD, Method.FULL, "every weight trains: full fine-tuning's quality, no "
                               "adapters to merge"),
                   self.fallback(Setting.METHOD, Method.LORA, "trains low-rank adapters, not every weight: only when "
                                 "full fine-tuning does not fit without a heavy fallback, or needs one that risks "
                                 "quality and trains slower", penalty=Penalty.ADAPTERS),
                   self.fallback(Setting.METHOD, Method.QLORA, "adapters over a 4-bit base: dequantization time and a "
                                 "small quantization error on top of LoRA's trade-off, weighed as one light fallback "
                                 "more: when LoRA does not fit, or needs a fallback (checkpointing) QLoRA is faster "
                                 "without", penalty=Penalty.QUANTIZED_ADAPTERS)]
        if facts.on_cpu:
            effects.append(self.forbid(Setting.METHOD, Method.QLORA, "on the CPU bitsandbytes dequantizes every "
                                                                     "4-bit weight in PyTorch (its fused kernels are "
                                                                     "CUDA's), and CPU RAM is rarely the limit"))
        return effects

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        method = Method.of(plan.method)
        if not method.spec.adapters:
            return []
        model = facts.model
        trained = adapter_parameters(model, plan.lora_rank, plan.lora_targets)
        share = trained / max(model.num_parameters, 1) * 100
        effects = [
            self.set(Setting.LORA_RANK, plan.lora_rank,
                     f"rank {plan.lora_rank}: {trained / 1e6:,.1f}M trainable parameters ({share:.2f} % of the model); "
                     "with adapters on every linear layer the rank matters little (QLoRA sec. 4); lora_alpha = 2 x "
                     "rank is the common scale"),
            self.set(Setting.LORA_TARGETS, plan.lora_targets, TARGETS_REASONS[LoraTargets.of(plan.lora_targets)]
                     + experts_note(model, plan)),
            self.warn(adapters_warning(model, plan.method, trained, plan.lora_targets), setting=Setting.METHOD)]
        full_rank = adapter_full_rank(model, plan.lora_targets)
        if plan.lora_rank > full_rank:
            effects.append(self.warn(f"rank {plan.lora_rank} is above {full_rank}, the full rank of the widest adapted "
                                     "layer: an update B x A has rank at most min(d_in, d_out), so the extra rank adds "
                                     "parameters and memory, not capacity (Hu et al. sec. 4.1; sec. 7.2 finds ranks "
                                     "1-64 enough)", setting=Setting.LORA_RANK))
        if method.spec.quantized_base and model.num_experts:  # probes.adapters.unquantized_expert_bytes
            extra = unquantized_expert_bytes(model, WeightsDtype.of(plan.weights_dtype).bytes, plan.double_quant)
            effects.append(self.warn(f"transformers 5 stores the routed experts as 3-D parameters, which bitsandbytes' "
                                     f"4-bit loading (nn.Linear layers only) leaves in {plan.weights_dtype}: "
                                     f"{extra / 2**30:.1f} GiB more than this estimate, which prices them in NF4 as "
                                     "transformers 4's per-expert linear layers were (the published QLoRA Mixtral "
                                     "runs); with transformers >= 5 plan LoRA, or shard the base", setting=Setting.METHOD))
        if method.spec.quantized_base and facts.packages.get("bitsandbytes") is False:
            effects.append(self.warn("QLoRA needs the bitsandbytes package, which is not installed here: "
                                     "pip install bitsandbytes", setting=Setting.METHOD))
        if facts.packages.get("peft") is False:
            effects.append(self.warn("adapters need the peft package, which is not installed here: pip install peft",
                                     setting=Setting.METHOD))
        return effects

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        offload = Offload.of(plan.offload)
        if not (Method.of(plan.method).spec.adapters and offload.optimizer):
            return None
        if offload.parameters and not offload.nvme and Parallelism.of(plan.parallelism).stage >= 3:
            return None  # the frozen base's shards in CPU RAM (FSDP CPUOffload): how a 70B QLoRA fits 2 x 24 GB
        return self.forbid(Setting.OFFLOAD, plan.offload, "the adapters' optimizer states are a few MB: offloading "
                                                          "them only adds PCIe traffic (offloading the frozen base's "
                                                          "parameters under FSDP / ZeRO-3 is allowed: "
                                                          "optimizer+parameters)", hard=True)


@register
class FullUnlessQualityRisk(Rule):
    id = "method.full-unless-quality-risk"
    title = ("--method auto: full fine-tuning unless its plan needs a quality-risk fallback and an adapter plan trains "
             "faster (or, under --objective memory, needs less memory at least as fast)")
    topic = "method"
    sources = [S.LORA_PAPER, S.QLORA_PAPER, S.LORA_LEARNS_LESS, S.BF16_UPDATES, S.ADAFACTOR_PAPER,
               S.EIGHT_BIT_PAPER]
    rationale = ("The fallback ladder ranks a fallback by what it costs, and adapters above every light full "
                 "fine-tuning fallback (method.adapters-when-full-does-not-fit). Some of those fallbacks cost the "
                 "trained model's quality, not only time: bf16 weights without fp32 masters round small updates away "
                 "(Zamirai et al. 2020), Adafactor's factored states can converge slower or worse (Shazeer & Stern "
                 "2018, sec. 3; the HF single-GPU guide), and the optimizer step in backward drops accumulation and "
                 "clipping by global norm. 8-bit states are not among them: block-wise 8-bit Adam matched 32-bit "
                 "Adam (Dettmers et al. 2022). A full fine-tune that needs such a fallback is no longer the "
                 "quality-safe choice; LoRA on every linear layer matched full fine-tuning on instruction tuning "
                 "(QLoRA sec. 4-5), and learns less new knowledge in long continued pre-training (Biderman et al. "
                 "2024). So the planner weighs the two by the figures: full fine-tuning wins when it needs no "
                 "quality-risk fallback, or when the fastest adapter plan is not faster; otherwise the adapter plan "
                 "wins, and the card says what full fine-tuning would have needed and at what speed. Under "
                 "--objective memory an adapter plan that needs less memory at least as fast wins too. --method "
                 "full keeps full fine-tuning.")

    def weigh(self, risks: list[str], full: tuple[float, int], adapters: tuple[float, int], adapter_method: str,
              memory_objective: bool) -> list[Effect]:
        """The effects that choose the adapter plan over the best full fine-tuning plan, or [] (full stays).

        Args:
            risks: the full plan's quality-risk fallbacks, as ``setting=value``.
            full, adapters: each best plan's (tokens/s, device bytes per GPU).
            adapter_method: the adapter plan's method (lora, qlora).
            memory_objective: the user asked for the least memory (``--objective memory``).
        """
        ratio = full[0] / adapters[0] if adapters[0] > 0 else float("inf")
        faster = adapters[0] > full[0]
        smaller = adapters[1] < full[1] and adapters[0] >= full[0]
        if not ((risks and faster) or (memory_objective and smaller)):
            return []
        if risks:
            need = f"full fine-tuning would need {' + '.join(risks)} at {ratio:.2f}x the speed"
        else:
            need = (f"full fine-tuning needs {full[1] / 2**30:.1f} GiB per GPU at {ratio:.2f}x the speed, this "
                    f"{adapter_method} plan {adapters[1] / 2**30:.1f} GiB")
        why = f"{need}: {adapter_method} trains the adapters faster, with no quality-risk fallback"
        return [self.prefer(Setting.METHOD, _ADAPTERS, why), self.forbid(Setting.METHOD, Method.FULL, need)]


@register
class PreQuantizedCheckpoint(Rule):
    id = "method.pre-quantized-checkpoint"
    title = "a checkpoint stored in bitsandbytes 4-bit trains QLoRA; other quantized checkpoints are not planned"
    topic = "method"
    sources = [S.HF_QUANT_OVERVIEW, S.PEFT_QUANTIZATION, S.HF_QUANT_BNB, S.QLORA_PAPER]
    rationale = ("A checkpoint saved quantized (config.json's quantization_config) holds the quantized weights only, "
                 "and quantized weights train through adapters (PEFT's quantization guide). bitsandbytes' 4-bit "
                 "ones (unsloth's *-bnb-4bit repositories, a QLoRA base saved after quantizing) are QLoRA's frozen "
                 "base, with the checkpoint's own double quantization: adapters train over them as over a base "
                 "quantized while loading. Full fine-tuning and LoRA need the 16-bit weights, which only the original "
                 "checkpoint has. Other methods (GPTQ, AWQ, bitsandbytes 8-bit, fp8, compressed-tensors) store "
                 "weights in layouts and kernels advisor does not price: plan from the original 16-bit checkpoint, "
                 "which the model card names.")

    def propose(self, facts: Facts) -> list[Effect]:
        q = facts.model.quantization
        if q is None:
            return []
        if q.bitsandbytes_4bit:
            why = (f"the checkpoint stores its weights in {q.label} (quantization_config): only adapters over them "
                   "train (QLoRA); for full fine-tuning or LoRA give the original 16-bit model")
            return [self.forbid(Setting.METHOD, m.value, why, hard=True) for m in (Method.FULL, Method.LORA)] + [
                self.prefer(Setting.METHOD, Method.QLORA, f"adapters over the checkpoint's {q.label} weights, the "
                            "base QLoRA trains over as it is stored (quantization_config)")]
        why = (f"the checkpoint stores its weights in {q.label} (quantization_config), which advisor does not price: "
               "give the original 16-bit model (its model card names it); advisor's QLoRA quantizes it while loading")
        return [self.forbid(Setting.METHOD, m.value, why, hard=True) for m in Method]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        q = facts.model.quantization
        if q is None or not q.bitsandbytes_4bit:
            return []
        return [self.warn(f"the checkpoint is stored in {q.label}: QLoRA over it is the only method it trains "
                          "(bnb_4bit_use_double_quant as stored); give the original 16-bit model for full fine-tuning "
                          "or LoRA", setting=Setting.METHOD)]


@register
class Bf16Weights(Rule):
    id = "method.bf16-weights"
    title = "pure bf16 weights when fp32 master weights do not fit, with a word on update precision"
    topic = "method"
    sources = [S.TORCHTUNE_LOW_PRECISION, S.BF16_UPDATES, S.HF_ANATOMY, S.TORCH_FSDP]
    rationale = ("Loading the model in bf16 (torch_dtype=torch.bfloat16) drops AMP's fp32 master weights: weights, "
                 "gradients and AdamW's moments take 2 bytes each (8 B/param instead of 16 + 2), which is how "
                 "torchtune and FSDP's pure-bf16 recipes fit 7-8B full fine-tuning on one GPU. bf16 has 8 bits of "
                 "mantissa, so small updates can round away (Zamirai et al. 2020): keep the optimizer states in "
                 "fp32, or use stochastic rounding or Kahan summation (torchao's AdamW bf16_stochastic_round, "
                 "optimi's Kahan-summed AdamW). Frozen weights (LoRA's base) are never updated, so bf16 costs "
                 "them nothing.")

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.gpu is not None and not facts.gpu.bf16:
            return [self.forbid(Setting.WEIGHTS_DTYPE, WeightsDtype.BF16, f"compute capability "
                                f"{facts.gpu.cc[0]}.{facts.gpu.cc[1]} has no bf16 arithmetic", hard=True)]
        return [self.fallback(Setting.WEIGHTS_DTYPE, WeightsDtype.BF16, "no fp32 master weights: bf16 updates can round "
                              "away, so only when AMP's fp32 weights do not fit", penalty=Penalty.MUCH_SLOWER,
                              when={Setting.METHOD: Method.FULL.value}, quality_risk=True),
                self.prefer(Setting.WEIGHTS_DTYPE, WeightsDtype.BF16, "the frozen base needs no fp32 copy: half the "
                            "bytes, no autocast casts", when={Setting.METHOD: _ADAPTERS})]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.weights_dtype != WeightsDtype.BF16 or plan.method != Method.FULL:
            return []
        return [self.warn("bf16 weights without fp32 masters: updates smaller than 2^-8 of a weight round away; keep "
                          "the learning rate schedule's tail in mind, or use stochastic rounding / Kahan summation "
                          "(torchao AdamW bf16_stochastic_round=True, optimi AdamW kahan_sum=True)",
                          setting=Setting.WEIGHTS_DTYPE)]

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if plan.weights_dtype != WeightsDtype.BF16:
            return None
        if plan.precision != Precision.BF16:
            return self.forbid(Setting.WEIGHTS_DTYPE, plan.weights_dtype, f"bf16 weights compute in bf16: use "
                               f"--precision bf16, not {plan.precision}", hard=True)
        if Parallelism.of(plan.parallelism).deepspeed and plan.method == Method.FULL:
            return self.forbid(Setting.WEIGHTS_DTYPE, plan.weights_dtype, "DeepSpeed's bf16 mode keeps fp32 master "
                               "weights in its optimizer: pure bf16 needs FSDP or one device", hard=True)
        return None


@register
class Fp16FrozenBase(Rule):
    id = "method.fp16-frozen-base"
    title = "adapters over an fp16 base under fp16 mixed precision (V100 / T4); never fp16 trained weights"
    topic = "method"
    sources = [S.PEFT_MODEL_REF, S.TORCH_AMP, S.NV_AMP, S.QLORA_PAPER]
    rationale = ("Before Ampere there is no bf16, and fp16 mixed precision keeps fp32 weights with 16-bit autocast "
                 "copies: a frozen LoRA base held so costs 4 + 2 bytes per weight, where the base loaded with "
                 "torch_dtype=torch.float16 costs 2 (Mistral-7B: 14.5 GB instead of 42 GB). Only the adapters train, "
                 "and PEFT casts fp16 adapter weights to fp32 (get_peft_model's autocast_adapter_dtype, on by "
                 "default), so GradScaler unscales fp32 gradients as AMP requires; the frozen fp16 weights are never "
                 "updated, so fp16's 10-bit mantissa costs them nothing. That is the usual LoRA recipe on T4 and "
                 "V100. Trained weights in fp16 without fp32 masters are another matter: GradScaler refuses fp16 "
                 "gradients and small updates vanish (NVIDIA's mixed-precision guide keeps an fp32 master copy).")

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.gpu is None:
            return [self.forbid(Setting.WEIGHTS_DTYPE, WeightsDtype.FP16, "the CPU trains in fp32", hard=True)]
        effects = [self.prefer(Setting.WEIGHTS_DTYPE, WeightsDtype.FP16, "the frozen base in fp16 needs no fp32 copy:"
                               " half the bytes, no autocast casts; PEFT keeps the adapters in fp32",
                               when={Setting.METHOD: _ADAPTERS, Setting.PRECISION: Precision.FP16.value})]
        if facts.gpu.bf16:
            effects.append(self.forbid(Setting.WEIGHTS_DTYPE, WeightsDtype.FP16, "bf16 has fp32's range: a 16-bit "
                                       "base is bf16 where the GPU has it"))
        return effects

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if plan.weights_dtype != WeightsDtype.FP16:
            return None
        if not Method.of(plan.method).spec.adapters:
            return self.forbid(Setting.WEIGHTS_DTYPE, plan.weights_dtype, "fp16 weights that train need fp32 "
                               "masters (GradScaler refuses fp16 gradients): fp16 holds only a frozen adapter base",
                               hard=True)
        if plan.precision != Precision.FP16:
            return self.forbid(Setting.WEIGHTS_DTYPE, plan.weights_dtype, f"an fp16 base computes in fp16: use "
                               f"--precision fp16, not {plan.precision}", hard=True)
        return None


@register
class PagedOptimizerForQlora(Rule):
    id = "method.paged-optimizer-for-adapters"
    title = "paged AdamW with QLoRA; 8-bit states keep the embedding in 32-bit"
    topic = "method"
    sources = [S.QLORA_PAPER, S.BNB_PAGED, S.BNB_8BIT_EMBEDDING]
    rationale = ("bitsandbytes' paged optimizers keep their states in CUDA unified memory, which the driver evicts "
                 "to CPU RAM page by page when the GPU runs short: the QLoRA recipe uses them so that a long batch's "
                 "memory spike slows a step instead of ending the run. 8-bit states destabilise the embedding "
                 "layer; transformers' Trainer keeps its states in 32-bit (issue 14819), a hand-written loop "
                 "should use bnb's StableEmbedding or GlobalOptimManager's override.")

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.on_cpu:
            return [self.forbid(Setting.OPTIMIZER, o, "paging needs CUDA unified memory")
                    for o in Optimizer if o.spec.paged]
        return [self.prefer(Setting.OPTIMIZER, [o.value for o in Optimizer if o.spec.paged],
                            "QLoRA's recipe: paged states absorb memory spikes", when={Setting.METHOD: Method.QLORA.value})]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.optimizer not in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT) or plan.method != Method.FULL:
            return []
        return [self.warn("8-bit optimizer states: the Trainer keeps the embedding's in 32-bit for you; in your own "
                          "loop use bitsandbytes.nn.StableEmbedding or GlobalOptimManager.override_config(embedding"
                          ".weight, 'optim_bits', 32)", setting=Setting.OPTIMIZER)]


@register
class DoubleQuantization(Rule):
    id = "method.double-quantization"
    title = "QLoRA's 4-bit base with double quantization: 4.127 bits a weight, not 4.5"
    topic = "method"
    sources = [S.QLORA_PAPER, S.HF_QUANT_BNB]
    rationale = ("NF4 stores one fp32 absmax constant per block of 64 weights: 0.5 bits a weight on top of the 4. "
                 "Double quantization stores those constants in 8 bits with one fp32 constant per 256 blocks: "
                 "0.127 bits, 0.37 bits a weight less (about 3 GB on a 65B model) at no measurable cost in accuracy "
                 "(QLoRA sec. 3). transformers' BitsAndBytesConfig leaves it off unless "
                 "bnb_4bit_use_double_quant=True; LitGPT calls it bnb.nf4-dq. advisor plans and writes it on; a plan "
                 "said without it (--no-double-quant) is priced at 4.5 bits.")

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not Method.of(plan.method).spec.quantized_base:
            return []
        width = WeightsDtype.of(plan.weights_dtype).bytes
        saving = frozen_base_bytes(facts.model, True, width, False) - frozen_base_bytes(facts.model, True, width, True)
        saving //= max(plan.model_parallel_size, 1)
        if plan.double_quant:
            return [self.set(Setting.DOUBLE_QUANT, True, f"the 4-bit base's quantization constants in 8 bits: "
                             f"{saving / 2**30:.2f} GiB less per GPU than plain NF4 (bnb_4bit_use_double_quant=True, "
                             "which transformers' BitsAndBytesConfig leaves off)")]
        return [self.warn(f"NF4 without double quantization keeps an fp32 constant per 64 weights: "
                          f"{saving / 2**30:.2f} GiB more per GPU than with it (bnb_4bit_use_double_quant=True; "
                          "LitGPT: --quantize bnb.nf4-dq)", Setting.DOUBLE_QUANT)]


@register
class LoraTargetsTheModelHas(Rule):
    id = "method.lora-targets"
    title = "adapters only on layers the model has as PEFT names them: q and v apart, or named attention projections"
    topic = "method"
    sources = [S.PEFT_LORA, S.LORA_PAPER]
    rationale = ("PEFT adapts whole linear layers, the modules its target_modules name. GPT-2's c_attn and "
                 "Phi-3's qkv_proj compute q, k and v in one layer, so adapters on q and v alone cannot be made "
                 "there: only on the fused layer (--lora-targets attention). advisor knows the attention "
                 "projections of the model types in probes/lora_config.py (from transformers' modeling files); "
                 "other types take all-linear. Refused where the plan is priced, not only when its LoraConfig "
                 "is written: a recommendation is one --emit can write. LitGPT's own code (--framework litgpt) "
                 "adapts q and v inside its fused qkv layer.")

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if not Method.of(plan.method).spec.adapters or plan.framework != Framework.TRANSFORMERS:
            return None
        try:
            target_modules(facts.model, plan.lora_targets)
        except UsageError as err:  # the one statement of which targets a model type has
            return self.forbid(Setting.LORA_TARGETS, plan.lora_targets, str(err), hard=True)
        return None

