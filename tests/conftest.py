"""Shared test fixtures and the gating of hardware-dependent tests."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def nvidia_gpu_reason() -> str | None:
    """None when an NVIDIA GPU answers through NVML, else why not."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"no NVIDIA driver/GPU here (NVML: {exc})"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML reports no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            if reason is None:
                reason = nvidia_gpu_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
