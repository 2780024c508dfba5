"""What the wizard's tests share: the terminal size of the snapshots, a fixed CPU-only machine (so that what the
wizard shows does not depend on where the tests run), and waiting for its workers."""

from __future__ import annotations

import time

import pytest

from probes.hardware import HardwareProfile, HostInfo

SIZE = (80, 24)
#: A fixed CPU-only machine, so that what the wizard shows does not depend on where the tests run.
CPU_HW = HardwareProfile(
    source="none",
    host=HostInfo(cpu_cores=2, ram_bytes=24 * 2**30, cpu_flags=["avx2", "fma"]),
    notes=["no NVIDIA driver found"],
)


async def wait_for(pilot, condition, timeout: float = 30.0) -> None:
    """Let workers run until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the wizard"
        await pilot.pause(0.05)


@pytest.fixture
def anyio_backend() -> str:
    """The wizard's tests run their coroutines on asyncio (anyio's plugin); import it into a test module to use it."""
    return "asyncio"
