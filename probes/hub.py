"""The Hugging Face Hub look-up of a config.json: offline switch, connection check, and one deadline for all of it.

A Hub that accepts the connection and never answers, a failing TLS handshake, or a proxy must cost the user
seconds: the whole look-up is held to :data:`HUB_TIMEOUT_S` (``--hub-timeout``), the library's retry warnings are
silenced, and the caller falls back to the cache and the shipped catalog with one note.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import warnings

from advisor.core.errors import UsageError


def hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return value in {"1", "true", "yes", "on"}


def hub_constants():
    """``huggingface_hub.constants``, which reads the ``HF_*`` environment variables when first imported.

    Raises:
        UsageError: a variable it cannot read (``HF_ENDPOINT=http://[::1`` is not a URL, ``HF_HUB_ETAG_TIMEOUT=abc``
            not a whole number of seconds): one line naming the variables, where the library's ValueError was an
            internal error (huggingface_hub "Environment variables",
            https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables).
    """
    try:
        from huggingface_hub import constants
    except ValueError as exc:
        names = ", ".join(sorted(k for k in os.environ if k.startswith("HF_")))
        raise UsageError(f"huggingface_hub cannot read its environment ({names}): {exc}") from None
    return constants


def hub_reachable(timeout_s: float = 2.0) -> bool:
    """A TCP connection to the Hub endpoint within ``timeout_s`` (skipped behind a proxy)."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = endpoint.split("://", 1)[-1].split("/", 1)[0]
    hostname, _, port = host.partition(":")
    try:
        with socket.create_connection((hostname, int(port or 443)), timeout=timeout_s):
            return True
    except (OSError, ValueError, OverflowError):  # no answer, or HF_ENDPOINT has no valid port: unreachable
        return False


#: Seconds the whole Hub look-up (connection check and config.json download, retries included) may take before
#: advisor falls back to the cache and the shipped catalog with one note. huggingface_hub's own defaults wait 10 s
#: per request and retry (``HF_HUB_ETAG_TIMEOUT``, huggingface_hub "Environment variables"); a planning question
#: should not. ``--hub-timeout S`` or ``ADVISOR_HUB_TIMEOUT`` changes it.
HUB_TIMEOUT_S = 3.0


def hub_timeout_s() -> float:
    """The Hub look-up's deadline: ``ADVISOR_HUB_TIMEOUT`` (set by ``--hub-timeout``) or :data:`HUB_TIMEOUT_S`.

    Raises:
        UsageError: not a positive finite number of seconds.
    """
    text = os.environ.get("ADVISOR_HUB_TIMEOUT", "").strip()
    if not text:
        return HUB_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 600):
        raise UsageError(f"--hub-timeout / ADVISOR_HUB_TIMEOUT must be seconds from 0 to 600, got {text!r}")
    return value


def download_config(model: str, deadline: float, notes: list[str]) -> str | None:
    """config.json of ``model`` from the Hub by ``deadline`` (a daemon thread: a Hub that accepts the connection
    and never answers is left behind, not waited for), the library's retry warnings silenced; None with one note
    when it fails or is late."""
    result: dict[str, object] = {}

    def fetch() -> None:
        try:
            from huggingface_hub import hf_hub_download

            result["path"] = hf_hub_download(model, "config.json", etag_timeout=max(deadline - time.monotonic(), 0.1))
        except Exception as exc:  # noqa: BLE001 - any failure of the Hub is a fallback, named in the note
            result["error"] = exc

    quiet = [logging.getLogger(name) for name in ("huggingface_hub", "urllib3", "httpx")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            worker = threading.Thread(target=fetch, name="advisor-hub", daemon=True)
            worker.start()
            worker.join(max(deadline - time.monotonic(), 0.0))
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
    if isinstance(result.get("path"), str):
        return str(result["path"])
    if "error" in result:
        notes.append(f"the Hub gave no config.json for '{model}': {type(result['error']).__name__}")
    else:
        notes.append(f"the Hub did not answer within {hub_timeout_s():g} s (--hub-timeout); using local sources only")
    return None
