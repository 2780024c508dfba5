"""On-device measurement: the simulator (a training step on fake tensors), the trial builder, the
validator's trial steps and their distributed worker. Imports torch lazily, inside functions.

Imports the engine (for predictions), ``rules`` and ``probes``; never ``advisor.app`` or ``tui``.
"""
