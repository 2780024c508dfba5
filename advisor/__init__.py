"""advisor: how to train a PyTorch / Hugging Face model fastest on the hardware you have.

The public API (lazy, so ``import advisor`` stays cheap)::

    from advisor import recommend, estimate, validate, probe_hardware, profile_model
"""

from __future__ import annotations

__all__ = ["estimate", "probe_hardware", "profile_model", "recommend", "validate"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in __all__:
        from advisor.app import api

        return getattr(api, name)
    raise AttributeError(name)
