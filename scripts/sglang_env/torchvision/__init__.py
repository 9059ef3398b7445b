"""Placeholder for torchvision in glm5lib's CPU contract-test environments (not torchvision).

No CPU build of torchvision for this torch is on PyPI, and the CUDA build cannot load on a
CPU-only torch. SGLang imports torchvision.transforms at module level (multimodal image
preprocessing) on the way to server_args and bench_serving, which never call it. Every name
here exists; calling one raises.
"""
from torchvision._placeholder import module_getattr

__version__ = "0.0.0+placeholder"
__getattr__ = module_getattr("torchvision")
