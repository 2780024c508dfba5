"""The wizard's steps, one module each, in the order the wizard shows them. Each is a ``TabPane`` that
asks its question, runs its slow work in a worker and posts the result (:mod:`tui.messages`)."""

from tui.steps.export import ExportStep
from tui.steps.hardware import HardwareStep
from tui.steps.model import ModelStep
from tui.steps.recommendation import RecommendationStep
from tui.steps.validate import ValidateStep
from tui.steps.workload import WorkloadStep

STEP_CLASSES = (HardwareStep, ModelStep, WorkloadStep, RecommendationStep, ValidateStep, ExportStep)
STEPS = tuple(step.STEP for step in STEP_CLASSES)  #: the step ids (TabPane ids), in order

__all__ = [
    "STEPS",
    "STEP_CLASSES",
    "ExportStep",
    "HardwareStep",
    "ModelStep",
    "RecommendationStep",
    "ValidateStep",
    "WorkloadStep",
]
