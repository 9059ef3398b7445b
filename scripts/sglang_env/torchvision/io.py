"""Placeholder (see torchvision/__init__.py)."""
from torchvision._placeholder import ImageReadMode, module_getattr  # noqa: F401

__getattr__ = module_getattr("torchvision.io")
