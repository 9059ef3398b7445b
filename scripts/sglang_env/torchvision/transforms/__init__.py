"""Placeholder (see torchvision/__init__.py)."""
from torchvision._placeholder import InterpolationMode, module_getattr  # noqa: F401

__getattr__ = module_getattr("torchvision.transforms")
