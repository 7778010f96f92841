"""hipscale: a HIP kernel behind a small C-API module, built on ROCm's Python packages."""

from ._native import device_count, scale

__all__ = ["device_count", "scale"]
