"""The runs measured on this machine applied to a priced plan (:mod:`advisor.engine.local_calibration`): the store
(:mod:`advisor.measure.run_store`, no torch) is read once per process; ``--no-local-calibration`` skips it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from advisor.engine.local_calibration import calibrated, calibration
from advisor.engine.speed import SpeedEstimate
from advisor.core.plan import Plan
from probes.hardware import HardwareProfile


@lru_cache(maxsize=4)
def _records(path: str, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    """The store's records at ``path`` as of ``mtime_ns`` (read again when the file changes)."""
    from advisor.measure import run_store

    return tuple(run_store.read(run_store.Path(path)).records)


def stored_runs() -> tuple[dict[str, Any], ...]:
    """The local store's records; none when it is missing or unreadable (a correction is never worth an error)."""
    from advisor.measure import run_store

    path = run_store.store_path()
    try:
        return _records(str(path), path.stat().st_mtime_ns)
    except OSError:
        return ()


def device_name(hardware: HardwareProfile) -> str:
    """The name the store's records give this hardware's device: the GPU's name, else the CPU model (``cpu``)."""
    from advisor.core.vocabulary import Device

    if hardware.gpu is not None:
        return hardware.gpu.name
    return hardware.host.cpu_model or Device.CPU.value


def calibrate(speed: SpeedEstimate, plan: Plan, hardware: HardwareProfile, off: bool = False) -> SpeedEstimate:
    """``speed`` corrected by the comparable runs measured here (unchanged when ``off``, or below the runs needed)."""
    if off:
        return speed
    return calibrated(speed, calibration(list(stored_runs()), plan, device_name(hardware)))


def calibrate_recommendation(rec, off: bool = False):
    """A :class:`~advisor.engine.recommendation.Recommendation` with its plan's speed corrected (:func:`calibrate`)."""
    speed = calibrate(rec.speed, rec.plan, rec.hardware, off)
    return rec if speed is rec.speed else rec.model_copy(update={"speed": speed})
