"""The wizard's tests run their coroutines on asyncio (anyio's plugin)."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
