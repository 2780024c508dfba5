"""The words every layer speaks, and nothing else: the vocabulary and its spec tables (``vocabulary``), the software
stack's values (``kernels``), a plan and its workload (``plan``), the table of plan dimensions (``dimensions``), errors
and exit codes (``errors``), units (``units``) and the limits on counts (``limits``).

A leaf package: it imports nothing of the project outside itself (``tests/test_architecture.py`` and the
import-linter contracts in pyproject.toml check it), so every other layer (probes, rules, engine, measure, app, tui)
may import it.
"""
