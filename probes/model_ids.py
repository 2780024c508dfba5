"""Model ids beside the exact one asked for: the Hub's renamed ids of the shipped configs, and the near matches
a not-found message offers (from the shipped catalog and the Hugging Face cache)."""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from probes.hub import hub_constants


def _catalog_dir():
    """The shipped configs' folder (``probes/configs``: one ``{org}--{name}.json`` per model id)."""
    return resources.files("probes").joinpath("configs")


def catalog_ids() -> list[str]:
    """Ids of the shipped configs, e.g. 'gpt2', 'meta-llama/Llama-2-7b-hf'."""
    return sorted(p.name[:-5].replace("--", "/") for p in _catalog_dir().iterdir() if p.name.endswith(".json"))


#: The Hub's current ids of shipped configs whose repositories moved into organisations in 2024 (each old id now
#: redirects to the new one: e.g. https://huggingface.co/openai-community/gpt2,
#: https://huggingface.co/google-bert/bert-base-uncased, https://huggingface.co/FacebookAI/roberta-base): the same
#: config.json, so the shipped file answers for both.
RENAMED_IDS = {
    f"{org}/{name}".lower(): name
    for org, names in (
        ("openai-community", ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")),
        ("google-bert", ("bert-base-uncased", "bert-large-uncased")),
        ("distilbert", ("distilbert-base-uncased",)),
        ("FacebookAI", ("roberta-base",)),
        ("google-t5", ("t5-small", "t5-base")),
    )
    for name in names
}


def _cached_ids() -> list[str]:
    """Model ids with a folder in the Hugging Face cache (``models--{org}--{name}``)."""
    constants = hub_constants()

    try:
        folders = list(Path(constants.HF_HUB_CACHE).iterdir())
    except OSError:
        return []
    prefix = "models" + constants.REPO_ID_SEPARATOR
    return [
        f.name[len(prefix) :].replace(constants.REPO_ID_SEPARATOR, "/") for f in folders if f.name.startswith(prefix)
    ]


def matching_ids(text: str, limit: int = 20) -> list[str]:
    """Shipped catalog ids that ``text`` finds anywhere, not only at the start (issue 45: 'llama' finds
    'meta-llama/Llama-2-7b-hf'), case-insensitive: ids containing it, those whose name after the organisation starts
    with it first; with none, ids holding its letters in order ('l27b' finds Llama-2-7b), the most compact first.
    At most ``limit``; an empty text finds none."""
    needle = text.strip().lower()
    if not needle:
        return []
    ids = catalog_ids()
    found = [i for i in ids if needle in i.lower()]
    if found:
        return sorted(found, key=lambda i: not i.lower().rsplit("/", 1)[-1].startswith(needle))[:limit]
    spans = [(span, i) for i in ids if (span := _subsequence_span(needle, i.lower())) is not None]
    return [i for _, i in sorted(spans)[:limit]]


def _subsequence_span(needle: str, text: str) -> int | None:
    """How many characters of ``text`` hold ``needle``'s characters in order from its first match, or None."""
    start = position = text.find(needle[0])
    if start < 0:
        return None
    for char in needle[1:]:
        position = text.find(char, position + 1)
        if position < 0:
            return None
    return position - start + 1


def near_matches(model: str, n: int = 5) -> list[str]:
    """Ids of the shipped catalog and the cache closest to ``model`` (difflib's ratio, case-insensitive; the
    name after the organisation is compared too, so 'Qwen/Qwen2.5-0.5B' finds 'Qwen/Qwen2.5-7B')."""
    known = sorted(set(catalog_ids()) | set(_cached_ids()))
    scores = []
    for candidate in known:
        a, b = model.lower(), candidate.lower()
        ratio = max(
            difflib.SequenceMatcher(None, a, b).ratio(),
            difflib.SequenceMatcher(None, a.rsplit("/", 1)[-1], b.rsplit("/", 1)[-1]).ratio(),
        )
        if ratio >= 0.6:
            scores.append((-ratio, candidate))
    return [c for _, c in sorted(scores)[:n]]
