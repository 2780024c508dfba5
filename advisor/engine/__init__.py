"""The engine: the memory and speed models, the planner's search and the recommendation it explains.

Pure computation on the facts: no I/O, no torch. Imports ``rules`` and ``probes``, never ``advisor.app``,
``advisor.measure`` or ``tui``.
"""
