"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from glm5lib.engines import vllm as ev
from glm5lib.errors import ServerLaunchError


@pytest.fixture(scope="session")
def vllm_installed() -> None:
    """Skips, saying why, where vLLM for CPU and its tiny model are not installed (``make vllm``)."""
    try:
        ev.vllm_python()
        ev.VllmConfig.load("vllm-capped").model_path()
    except (ServerLaunchError, ValueError) as exc:
        pytest.skip(f"vLLM for CPU is not installed here ({exc}); run `make vllm`")
