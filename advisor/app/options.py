"""Every option of the command line, the Python API and the wizard, declared once.

Each group of questions is a pydantic model whose ``Field``s carry the type, the default, the bounds,
the unit and the help. :func:`add_arguments` turns a model into argparse flags (``--seq-len``,
choices from the vocabulary's ``Literal`` types, ``--tf32/--no-tf32`` for optional booleans, the
field's description as help), the API validates its keyword arguments through the same model
(:func:`parse`), and the wizard reads defaults and choices from it, so the three accept and refuse
the same values with the same words. The plan's own settings (``--precision``, ``--optimizer``, …)
are :class:`advisor.core.plan.Plan`'s fields, whose descriptions are their help.

No torch, transformers or textual: the command line builds its parser from here on the fast path.
"""

from __future__ import annotations

import argparse
import re
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, create_model, field_validator

from probes.cuda_stack import CUDA_VERSION_PATTERN
from advisor.core.errors import UsageError
from advisor.core.kernels import STACK_PACKAGES
from advisor.core.text import shown
from advisor.core.limits import MAX_GLOBAL_BATCH_SIZE, MAX_GPUS_PER_NODE, MAX_NODES, MAX_SEQ_LEN, MAX_SIZE_BYTES
from advisor.core.vocabulary import Method, Objective, Task, literal, values
from advisor.core.dimensions import ADAPTER_SHAPE, BY_NAME, ESTIMATE_DEFAULTS, PLAN_FLAGS  # noqa: F401 (the CLI's)
from advisor.core.plan import STACK_SETTINGS, Plan, Workload
from advisor.app.sizes import size  # noqa: F401 (the flags' type, and the API's)

DEFAULT_SEQ_LEN = 1024  #: capped by the model's max positions
DEFAULT_GLOBAL_BATCH_SIZE = 64  #: the documents' running example ("train with a batch size of 64")
WIZARD_OUT_DIR = "advisor-config"  #: the wizard's export folder (``advisor tui --out``)
#: Optional packages whose presence changes the plan (8-bit optimizers, ZeRO, adapters, kernels, fp8).
OPTIONAL_PACKAGES = tuple(STACK_PACKAGES)
#: Most timed or warm-up steps of one ``validate`` trial: a trial is a seconds-long check (README "Validate"),
#: ten steps by default; a million allows a soak test stopped with Ctrl-C, and refuses only typos beyond it.
MAX_TRIAL_STEPS = 1_000_000
#: ``validate``'s default time budget, seconds: a few minutes (issue 45: a CPU trial of gpt2 was predicted at 5,179 s).
DEFAULT_TRIAL_SECONDS = 300
#: The longest time budget ``--max-seconds`` takes, seconds (a week).
MAX_TRIAL_SECONDS = 7 * 24 * 3600
#: Most ``validate`` trials (six by default: the plan and up to five corrections).
MAX_TRIALS = 100


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class _Options(BaseModel):
    """Base of the option groups: unknown keywords are refused, values validated on assignment, and a bool is not
    taken for a number (pydantic's lax mode would read ``global_batch_size=True`` as 1)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        kind, _ = _unwrap(cls.model_fields[info.field_name].annotation)
        if isinstance(value, bool) and kind in (int, float):
            raise ValueError(f"expected a {'whole ' if kind is int else ''}number, not {str(value).lower()}")
        return value


class HardwareOptions(_Options):
    """What to plan for: this machine, or catalog GPUs over nodes and links."""

    gpu: str | None = Field(None, description="plan for catalog GPUs instead of this machine's (`advisor probe "
                                              "--gpu list` lists them) (default: this machine's GPUs)", json_schema_extra={"metavar": "NAME[:COUNT]"})
    nodes: int = Field(1, ge=1, le=MAX_NODES, description="identical nodes (default 1)", json_schema_extra={"metavar": "N"})
    interconnect: str | None = Field(
        None, description="nvlink or pcie inside a node, infiniband (200 Gb/s) or ethernet (100 Gb/s) between nodes; "
                          "comma-separated, e.g. pcie,ethernet (default: the catalog's or the probed links; "
                          "infiniband between nodes)", json_schema_extra={"metavar": "LINKS"})
    inter_node_gbps: float | None = Field(None, gt=0, allow_inf_nan=False, description="network bandwidth between "
                                                                 "nodes per NIC, gigabits per second (default: the "
                                                                 "--interconnect's figure)",
                                          json_schema_extra={"metavar": "Gb/s"})
    nics_per_node: int | None = Field(None, ge=1, le=64, description="network adapters per node, shared by its "
                                                                    "GPUs (default: 1 on ethernet, one per GPU on "
                                                                    "infiniband, as on HGX / DGX nodes)",
                                      json_schema_extra={"metavar": "N"})
    host_memory_bytes: int | None = Field(None, ge=1, le=MAX_SIZE_BYTES, description="CPU RAM per node for offloaded optimizer states "
                                                                  "and parameters, e.g. 256GB (default: this "
                                                                  "machine's RAM; unknown for --gpu)",
                                          json_schema_extra={"metavar": "SIZE", "flag": "--host-memory", "size": True})
    cuda_context_bytes: int | None = Field(None, ge=1, le=MAX_SIZE_BYTES, description="device memory the CUDA context and libraries "
                                                                   "take per GPU, e.g. 1343MiB (default: by "
                                                                   "--cuda-version: 500MiB with lazy module "
                                                                   "loading, CUDA 11.7+; 1343MiB before)",
                                           json_schema_extra={"metavar": "SIZE", "flag": "--cuda-context",
                                                              "size": True})
    cuda_version: str | None = Field(None, pattern=CUDA_VERSION_PATTERN,
                                     description="the CUDA runtime torch is built with where you train "
                                                 "(torch.version.cuda), e.g. 11.8 (default: this machine's torch; "
                                                 "for --gpu a current one, 12.2+)",
                                     json_schema_extra={"metavar": "X.Y"})


class ModelOptions(_Options):
    """Which model (an id or a path: the API takes it positionally, or a ModelProfile)."""

    model: str = Field(description="Hub id (gpt2), a folder with config.json, or a config.json path",
                       json_schema_extra={"metavar": "ID_OR_PATH",  # required but by `advisor tui`:
                                          "unset": "none, the wizard asks for it on its model step"})


class HubOptions(_Options):
    """How long the model look-up may wait for the Hugging Face Hub (the CLI's; the API reads ADVISOR_HUB_TIMEOUT)."""

    hub_timeout_s: float | None = Field(None, gt=0, le=600, allow_inf_nan=False,
                                        description="seconds the Hub look-up of --model may take before the cache and "
                                                    "the shipped catalog are used (default 3)",
                                        json_schema_extra={"metavar": "S", "flag": "--hub-timeout"})


class WorkloadOptions(_Options):
    """The question: the task head, sequence length, global batch and what matters most."""

    task: literal(Task) | None = Field(None, description="task head (default: from the config's architectures)")
    seq_len: int | None = Field(None, ge=1, le=MAX_SEQ_LEN, description="tokens per sample (default: min(model max positions, "
                                                        f"{DEFAULT_SEQ_LEN}))", json_schema_extra={"metavar": "L"})
    global_batch_size: int | None = Field(None, ge=1, le=MAX_GLOBAL_BATCH_SIZE, description="samples per optimizer step (default "
                                                                  f"{DEFAULT_GLOBAL_BATCH_SIZE})",
                                          json_schema_extra={"metavar": "B"})
    objective: literal(Objective) = Field(Objective.SPEED.value,
                                          description="what matters most: the fastest plan that fits (default) or the "
                                                      "least device memory within 10 percent of the fastest plan's speed")
    from_scratch: bool = Field(False, description="pre-training from random weights (every weight trains: no LoRA / "
                                                  "QLoRA)")
    mean_sample_len: int | None = Field(None, ge=1, description="average tokens per sample before padding (default: "
                                                                "samples fill --seq-len); shorter samples make "
                                                                "packing pay", json_schema_extra={"metavar": "L"})




class _PlanSettings(_Options):
    """Plan settings given by the user (None: the command's default or the recommendation's value)."""

    def given(self) -> dict[str, Any]:
        """The settings the user gave (not None)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


def _plan_setting(name: str) -> tuple[Any, Any]:
    """A :class:`advisor.core.plan.Plan` field as an optional option: its type and help; counts are >= 1, at most the
    row's limit in :mod:`advisor.core.dimensions` (else the largest global batch), with the row's metavar."""
    field = Plan.model_fields[name]
    row = BY_NAME[name]
    bounds = {"ge": 1, "le": row.limit or MAX_GLOBAL_BATCH_SIZE} if field.annotation is int else {}
    extra = {"metavar": row.metavar} if row.metavar else {}
    if name in ADAPTER_SHAPE:  # the adapters' shape defaults to Plan's whatever the command
        extra["unset"] = field.default
    return field.annotation | None, Field(None, description=field.description, json_schema_extra=extra, **bounds)


#: The plan settings as options, made from ``Plan``'s own fields (type, choices, help), so a new plan
#: dimension is a flag of ``estimate`` and ``validate`` once its row in :mod:`advisor.core.dimensions` says so
#: (:data:`~advisor.core.dimensions.PLAN_FLAGS`).
PlanOptions = create_model("PlanOptions", __base__=_PlanSettings, __module__=__name__,
                           **{name: _plan_setting(name) for name in PLAN_FLAGS})


#: ``recommend``'s choice of method ('auto': the planner's), in the vocabulary's order.
METHOD_CHOICES = ("auto", *values(Method))


class _MethodChoice(_Options):
    method: Literal[METHOD_CHOICES] = Field("auto", description="what to train: auto (full fine-tuning when it fits "  # type: ignore[valid-type]
                                                                "without a heavy fallback, else LoRA, then QLoRA), "
                                                                "full, lora or qlora (default auto)")


#: ``recommend``'s method options: the method to plan (or 'auto') and the adapters' shape, from ``Plan``'s fields.
MethodOptions = create_model("MethodOptions", __base__=_MethodChoice, __module__=__name__,
                             **{name: _plan_setting(name) for name in ADAPTER_SHAPE})


def _stack_pin(name: str) -> tuple[Any, Any]:
    field = Workload.model_fields[name]
    return field.annotation, Field(None, description=Plan.model_fields[name].description + " (default: the planner's "
                                   "choice among what is installed and supported)")


#: ``recommend``'s software-stack options: a value the planner must use (None: its choice), from ``Workload``'s
#: fields of the same names (:data:`advisor.core.plan.STACK_SETTINGS`).
StackOptions = create_model("StackOptions", __base__=_Options, __module__=__name__,
                            **{name: _stack_pin(name) for name in STACK_SETTINGS})


class SimulateOption(_Options):
    """``estimate``'s check of the analytic memory model on fake tensors."""

    simulate: bool = Field(False, description="also run a real training step on fake tensors (imports torch; seconds; "
                                              "default: off)")


class CalibrationOption(_Options):
    """Whether ``recommend``, ``estimate`` and ``compare`` scale the speed by the runs measured on this machine."""

    no_local_calibration: bool = Field(False, description="price the speed as the model does, without the correction "
                                                          "of the runs measured on this GPU model (advisor runs)")


class TrialOptions(_Options):
    """How ``validate`` runs its trials."""

    steps: int = Field(10, ge=1, le=MAX_TRIAL_STEPS, description="timed steps per trial (default 10)", json_schema_extra={"metavar": "N"})
    warmup: int = Field(2, ge=1, le=MAX_TRIAL_STEPS, description="untimed warm-up steps per trial (default 2)",
                        json_schema_extra={"metavar": "N"})
    compare: bool = Field(False, description="also run the baseline (fp32, no checkpointing, AdamW, same global batch)")
    memory_limit_bytes: int | None = Field(None, ge=1, le=MAX_SIZE_BYTES, description="hold the trials to less memory than the device "
                                                                   "has, e.g. 8GiB (default: no limit)", json_schema_extra={
                                               "metavar": "SIZE", "flag": "--memory-limit", "size": True})
    max_trials: int = Field(6, ge=1, le=MAX_TRIALS, description="most trials, corrections included (default 6; the baseline has "
                                                 "its own)", json_schema_extra={"metavar": "N"})
    max_seconds: float = Field(DEFAULT_TRIAL_SECONDS, gt=0, le=MAX_TRIAL_SECONDS, allow_inf_nan=False, description=(
        "the trials' time budget in seconds: fewer timed steps when a trial is predicted longer, and a trial still "
        f"running at the end is cut with a partial report (default {DEFAULT_TRIAL_SECONDS})"), json_schema_extra={"metavar": "S"})
    nproc: int | None = Field(None, ge=1, le=MAX_GPUS_PER_NODE, description="CPU only: a distributed trial over N "
                                                      "processes (torchrun, gloo); the global batch is split (default: "
                                                      "one process, or the plan's)",
                              json_schema_extra={"metavar": "N"})


def parse(model: type[_Options], values: dict[str, Any]) -> _Options:
    """Validate ``values`` against an option group.

    Raises:
        UsageError: the first bad value, as one line naming its flag (``--seq-len must be >= 1, got 0``).
    """
    try:
        return model.model_validate(values)
    except ValidationError as err:
        raise UsageError(_message(err, model)) from None


def _message(err: ValidationError, model: type[BaseModel] | None = None) -> str:
    first = err.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    field = (model.model_fields.get(name) if model is not None else None)
    extra = field.json_schema_extra if field is not None and isinstance(field.json_schema_extra, dict) else {}
    flag = extra.get("flag")
    if flag:  # the flag's own spelling (--memory-limit for memory_limit_bytes)
        name = flag[2:].replace("-", "_")
    given = first.get("input")
    ctx = first.get("ctx") or {}
    kind = first["type"]
    if kind in ("greater_than_equal", "greater_than"):
        if kind == "greater_than_equal" and isinstance(ctx.get("ge"), int):  # whole numbers: >= 1 reads > 0
            return f"{_flag(name)} must be > {ctx['ge'] - 1}, got {shown(given)}"
        sign, bound = (">=", ctx.get("ge")) if kind == "greater_than_equal" else (">", ctx.get("gt"))
        return f"{_flag(name)} must be {sign} {bound:g}, got {shown(given)}"
    if kind in ("less_than_equal", "less_than"):
        return f"{_flag(name)} must be {'<=' if kind == 'less_than_equal' else '<'} {ctx.get('le', ctx.get('lt'))}, got {shown(given)}"
    if kind == "finite_number":
        return f"{_flag(name)} must be a finite number, got {shown(given)}"
    if kind in ("literal_error", "enum"):
        return f"{_flag(name)} {shown(given)}: choose from {ctx.get('expected', '')}"
    if kind == "value_error":
        return f"{_flag(name)} {given!r}: {first['msg'].removeprefix('Value error, ')}"
    if kind == "extra_forbidden":
        return f"unknown option '{name}'"
    if kind == "string_pattern_mismatch":  # the metavar says the form (--cuda-version X.Y)
        return f"{_flag(name)} {given!r}: must look like {extra.get('metavar') or ctx.get('pattern')}"
    return f"{_flag(name)} {given!r}: {first['msg']}"


def check_given(hardware: object = None, plan: object = None) -> None:
    """Refuse a ``hardware`` or ``plan`` argument of the wrong type as one line (not an AttributeError later).

    Raises:
        UsageError: ``hardware`` is not a HardwareProfile, or ``plan`` not a Plan.
    """
    from probes.hardware import HardwareProfile

    if hardware is not None and not isinstance(hardware, HardwareProfile):
        raise UsageError(f"hardware must be a HardwareProfile (from probe_hardware), got {type(hardware).__name__}")
    if plan is not None and not isinstance(plan, Plan):
        raise UsageError(f"plan must be a Plan (a recommendation's .plan), got {type(plan).__name__}")


# -- the command line ----------------------------------------------------------------------------------

def _number(kind: type):
    """An argparse type: a whole (or real) number. Bounds are checked where the API checks them
    (:func:`parse`), so both refuse a value with the same words."""
    def convert(text: str):
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {'whole ' if kind is int else ''}number") from None
    return convert


_NEGATIVE = re.compile(r"-(\d|\.\d|nan\b|inf)", re.IGNORECASE)


def join_negative_values(argv: list[str]) -> list[str]:
    """``--memory-limit -5GiB`` → ``--memory-limit=-5GiB``: argparse takes a value that starts with '-' and is not a
    plain number (-5GiB, -inf) for a flag and answers "expected one argument"; joined, the flag's own check says
    what is wrong with the value (``'-5GiB' must be more than 0 bytes``)."""
    out: list[str] = []
    for token in argv:
        previous = out[-1] if out else ""
        if (_NEGATIVE.match(token) and previous.startswith("--") and "=" not in previous
                and previous not in _FLAG_NAMES_WITHOUT_VALUE):
            out[-1] = f"{previous}={token}"
        else:
            out.append(token)
    return out


#: Flags that take no value (``--json``, ``--tf32``, ...): a negative-looking token after them is its own argument.
_FLAG_NAMES_WITHOUT_VALUE: set[str] = {"--json", "--help", "--version"}


def _unwrap(annotation) -> tuple[Any, bool]:
    """(the type inside ``X | None``, whether None is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return (args[0] if len(args) == 1 else annotation), True
    return annotation, False


def add_arguments(parser: argparse._ActionsContainer, model: type[BaseModel], names: tuple[str, ...] | None = None,
                  *, defaults: dict[str, Any] | None = None, required: tuple[str, ...] = (),
                  helps: dict[str, str] | None = None, unset: str | None = None) -> None:
    """Add one flag per field of ``model`` (or of ``names``) to ``parser``.

    ``defaults`` replaces a field's default for this command, ``required`` makes flags mandatory, ``helps``
    replaces a field's help for this command. A help that does not say its default gets ``(default: …)``: the
    value, ``off`` for a switch, and for an unset option the field's ``unset`` extra, else ``unset`` (what the
    command decides, e.g. "chosen for the hardware"), else "none".
    """
    for name in names or tuple(model.model_fields):
        field = model.model_fields[name]
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        kind, optional = _unwrap(field.annotation)
        # a field the model requires (``model``) that this command leaves optional defaults to None, not pydantic's
        # PydanticUndefined sentinel (issue 45: `advisor tui` without --model took the sentinel for a model id)
        default = (defaults or {}).get(name, None if field.is_required() else field.default)
        help_text = (helps or {}).get(name, field.description)
        if help_text and "default" not in help_text and name not in required:
            if kind is bool and not (optional and default is None):
                shown = "off"
            elif default is None:
                shown = extra.get("unset") or unset or "none"
            else:
                shown = default
            help_text += f" (default: {_value(shown)})"
        kwargs: dict[str, Any] = {"dest": name, "help": help_text, "default": default}
        flag = extra.get("flag", _flag(name))
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction if optional and default is None else "store_true"
            _FLAG_NAMES_WITHOUT_VALUE.update((flag, "--no-" + flag[2:]))
            parser.add_argument(flag, **kwargs)
            continue
        if typing.get_origin(kind) is Literal:
            kwargs["choices"] = typing.get_args(kind)
        elif extra.get("size"):
            kwargs["type"] = size
        elif kind in (int, float):
            kwargs["type"] = _number(kind)
        if "metavar" in extra:
            kwargs["metavar"] = extra["metavar"]
        if name in required:
            kwargs["required"] = True
            kwargs.pop("default")
        parser.add_argument(flag, **kwargs)


def _value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def collect(args: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    """The parsed values of ``model``'s fields that the command declared."""
    return {name: getattr(args, name) for name in model.model_fields if hasattr(args, name)}
