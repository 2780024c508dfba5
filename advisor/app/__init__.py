"""The application: the Python API, the command line, the rich report, the emitted configs and
atomic file writes. The only part of ``advisor`` that talks to a user; imports the engine, and the
measurement package lazily (validation, simulation).
"""
