"""The wizard's messages: what the steps' workers report, posted on a step and bubbling to the app.

Every one is a :class:`WizardMessage`, so a parent (or a test) can take them all with
``@on(WizardMessage)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.message import Message

from advisor.engine.recommendation import Recommendation
from probes.hardware import HardwareProfile
from probes.model import ModelProfile


class WizardMessage(Message):
    """A result of one of the wizard's steps."""


class HardwareProbed(WizardMessage):
    """The local probe finished."""

    def __init__(self, hardware: HardwareProfile) -> None:
        super().__init__()
        self.hardware = hardware


class ModelResolved(WizardMessage):
    """A model id or path resolved to its profile."""

    def __init__(self, profile: ModelProfile) -> None:
        super().__init__()
        self.profile = profile


class ModelFailed(WizardMessage):
    """A model id or path did not resolve (the one-line error the CLI would print)."""

    def __init__(self, text: str, error: str) -> None:
        super().__init__()
        self.text, self.error = text, error


class RecommendationReady(WizardMessage):
    """The planner's recommendation for the current question."""

    def __init__(self, recommendation: Recommendation) -> None:
        super().__init__()
        self.recommendation = recommendation


class PlanningFailed(WizardMessage):
    """No plan (or a bad input): the one-line error, with what would fit where known."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ValidationProgress(WizardMessage):
    """A validator event: a trial started, a step finished, a trial finished."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event


class ValidationDone(WizardMessage):
    """The validator returned its report (partial when cancelled), or failed with an error line."""

    def __init__(self, report: Any = None, error: str | None = None) -> None:
        super().__init__()
        self.report, self.error = report, error


class Exported(WizardMessage):
    """Files written by the export step."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.paths = paths


class ComparisonReady(WizardMessage):
    """The model's best plan on every catalog GPU (``advisor compare``), or an error line."""

    def __init__(self, comparison: Any = None, error: str | None = None) -> None:
        super().__init__()
        self.comparison, self.error = comparison, error
