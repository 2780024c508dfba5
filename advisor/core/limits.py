"""Documented limits on the counts advisor accepts, so that a small input can never ask for unbounded work.

Each limit is several times the largest value a public source reports, so that no real model, cluster or
batch is refused, while a typo (``--gpu a100-80gb:100000``, a config with 10⁶ layers) is one line and a
usage or config exit code instead of minutes of work or an exhausted memory. The option declarations
(:mod:`advisor.app.options`), the GPU catalog (:func:`probes.gpu_catalog.parse_gpu_spec`) and the config
check (:mod:`probes.config_check`) read them from here. A leaf module: it imports nothing.
"""

from __future__ import annotations

#: GPUs per node. NVIDIA GB200 NVL72 joins 72 GPUs in one NVLink domain, the largest "node" sold
#: (https://www.nvidia.com/en-us/data-center/gb200-nvl72/, "72 Blackwell GPUs"); 128 leaves room for the next.
MAX_GPUS_PER_NODE = 128

#: Nodes. Llama 3 405B trained on 16,384 H100 GPUs = 2,048 nodes of 8 (Dubey et al. 2024,
#: https://arxiv.org/abs/2407.21783 sec. 3.3.1); 16,384 nodes allow one GPU per node at that scale.
MAX_NODES = 16_384

#: Samples per optimizer step. LAMB trained BERT with a batch of 65,536 samples (You et al. 2019,
#: https://arxiv.org/abs/1904.00962 sec. 5), among the largest published; 2²⁴ is 256 times that.
MAX_GLOBAL_BATCH_SIZE = 2**24

#: Tokens per sample. Llama 4 Scout takes a 10M-token context (https://ai.meta.com/blog/llama-4-multimodal-intelligence/,
#: "industry-leading context window of 10M"); 2²⁴ = 16.8M.
MAX_SEQ_LEN = 2**24

#: Transformer blocks per stack. DeepNet trained a 1,000-layer transformer (Wang et al. 2022,
#: https://arxiv.org/abs/2203.00555, abstract), the deepest published; 2,048 allows twice that.
MAX_LAYERS = 2048

#: Model width, MLP width, attention heads and head size (elements). PaLM 540B's d_model is 18,432 and its
#: MLP 73,728 (Chowdhery et al. 2022, https://arxiv.org/abs/2204.02311 Table 1); 2¹⁸ = 262,144 is 3.5x the MLP.
MAX_WIDTH = 2**18

#: Vocabulary (embedding rows) and position rows. Gemma's vocabulary has 256k entries (Gemma Team 2024,
#: https://arxiv.org/abs/2403.08295 sec. 2); 2²⁴ = 16.8M is 64 times that and matches :data:`MAX_SEQ_LEN` for
#: position tables.
MAX_VOCAB = 2**24

#: Transformer blocks ``estimate --simulate`` runs on fake tensors. A fake step costs about 0.1 CPU-s a block on a
#: 2-core Xeon (a gpt2-shaped model: 32 blocks 7 CPU-s, 128 blocks 17), whatever the widths; the deepest public model
#: trained, Llama 3.1 405B, has 126 (https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json), so 256
#: blocks (about half a minute) simulate every real model while a config at the layer limit (2,048) is refused.
MAX_SIMULATED_LAYERS = 256

#: Routed experts per block. DeepSeek-V3 has 256 routed experts (https://arxiv.org/abs/2412.19437 sec. 4.2);
#: 4,096 is 16 times that.
MAX_EXPERTS = 4096

#: Tokens a ``compare`` times. Llama 3 pre-trained on over 15T tokens (Dubey et al. 2024,
#: https://arxiv.org/abs/2407.21783 sec. 3.1), among the most published; 10¹⁵ is over 60 times that.
MAX_TOKENS = 10**15

#: Bytes of a memory size (``--host-memory``, ``--cuda-context``, ``--memory-limit``). The largest node sold holds
#: tens of TiB (GB200 NVL72: 13.5 TB of HBM3e and 17 TB of LPDDR5X,
#: https://www.nvidia.com/en-us/data-center/gb200-nvl72/); 2⁶⁰ bytes (1 EiB) is far above it and still an exact float.
MAX_SIZE_BYTES = 2**60

#: Bytes of a config.json or a ``--plan`` file read (a real config is a few KiB, a plan JSON tens of KiB), so that
#: ``--plan /dev/zero`` is refused after 16 MiB instead of read without end.
MAX_JSON_BYTES = 16 * 2**20

#: JSON values (objects, lists and the commas between items) of a config.json or a ``--plan`` file: a real config
#: holds hundreds (an ImageNet classifier's id2label map about 2,000), a recommendation's JSON thousands; 2¹⁸ keeps a
#: 16 MiB file of small objects (5 million of them, 800 MiB as Python objects) from being parsed at all.
MAX_JSON_VALUES = 2**18

#: Nesting of a config.json (transformers nests a text / vision sub-config one or two levels deep); deeper is refused
#: before Python's recursion limit turns it into a RecursionError.
MAX_JSON_DEPTH = 32

#: Characters of a ``--model`` id or path. Linux's PATH_MAX is 4,096 bytes (``limits.h``,
#: https://man7.org/linux/man-pages/man3/realpath.3.html "PATH_MAX"); a Hub id is at most 96 characters per part
#: (huggingface_hub ``validate_repo_id``).
MAX_MODEL_ID = 4096


def divisors(n: int) -> list[int]:
    """Every whole divisor of ``n`` (n >= 1), ascending: the micro-batches that split a batch of ``n``.

    From the prime factorisation (trial division while d² ≤ what is left, each factor divided out), so the
    cost is that of the factorisation and the divisor count, not of ``n``: a few divisions for a batch of
    2¹⁵·5¹⁵, at most 4,096 for the largest batch :data:`MAX_GLOBAL_BATCH_SIZE` allows (2²⁴).
    """
    out = [1]
    rest, d = n, 2
    while d * d <= rest:
        power = 0
        while rest % d == 0:
            rest //= d
            power += 1
        out = [x * d**k for x in out for k in range(power + 1)]
        d += 1
    if rest > 1:
        out += [x * rest for x in out]
    return sorted(out)
