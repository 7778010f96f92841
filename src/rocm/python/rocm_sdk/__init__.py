"""rocm_sdk: find and load the ROCm libraries installed by the rocm packages.

Written for quarry's ROCm packaging. The package data (_dist_info) is
generated at packaging time: the version, the sibling package directories
and where each library lives under its SONAME.
"""

import ctypes
import fnmatch
import importlib.util
import os
import warnings

from . import _dist_info

__version__ = _dist_info.VERSION

__all__ = ["__version__", "initialize_process", "find_libraries", "package_dir", "target_family"]


class RocmSdkError(RuntimeError):
    pass


def libraries_package(family):
    """The import name of the libraries package for a target family."""
    if _dist_info.SPLIT:
        return _dist_info.PACKAGES["libraries"]
    return "_rocm_sdk_libraries_%s%s" % (family.replace("-", "_"), _dist_info.SUFFIX)


def package_dir(kind):
    """The directory of the installed package `kind` (core, libraries,
    profiler, devel: the expanded tree, expanding it first), or None."""
    name = _dist_info.PACKAGES.get(kind)
    if kind == "libraries":
        name = libraries_package(target_family())
    if kind == "devel":
        import importlib.util as _u

        if _u.find_spec("rocm_sdk_devel") is None:
            return None
        from . import _devel

        return _devel.expand()
    if not name:
        return None
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def target_family():
    """ROCM_SDK_TARGET_FAMILY, else the detected GPU's family, else the default."""
    from . import _targets

    env = os.environ.get("ROCM_SDK_TARGET_FAMILY")
    if env:
        return env
    detected = _targets.detected_family(_dist_info.FAMILIES)
    return detected or _dist_info.DEFAULT_FAMILY


def _split(value):
    return [p.strip() for p in value.replace(";", ",").split(",") if p.strip()]


def find_libraries(*shortnames):
    """Absolute paths of libraries by short name (`amdhip64`, `rocblas`...)."""
    paths = []
    for short in shortnames:
        entry = _dist_info.LIBRARIES.get(short)
        if entry is None:
            raise RocmSdkError(
                "unknown ROCm library %r; known: %s" % (short, ", ".join(sorted(_dist_info.LIBRARIES)))
            )
        kind, rel = entry
        if rel is None:
            raise RocmSdkError("library %r is not part of this ROCm build" % short)
        base = package_dir(kind)
        if base is None:
            raise RocmSdkError(
                "library %r lives in the %s package, which is not installed: pip install 'rocm[%s]'"
                % (short, kind, "libraries" if kind == "libraries" else kind)
            )
        path = os.path.join(base, rel)
        if not os.path.exists(path):
            raise RocmSdkError("library %r should be at %s, which is missing; reinstall the package" % (short, path))
        paths.append(path)
    return paths


def _installed_version():
    try:
        from importlib.metadata import version

        return version("rocm-sdk-core")
    except Exception:
        return __version__


def initialize_process(preload_shortnames=(), rtld_global=True, check_version=None, fail_on_version_mismatch=False):
    """Preload ROCm libraries so frameworks find them without LD_LIBRARY_PATH.

    `ROCM_SDK_PRELOAD_LIBRARIES` (comma or semicolon separated) adds more.
    `check_version` is a glob like "7.10.*" matched against the installed
    core version: a mismatch warns, or raises when asked.
    """
    if check_version:
        installed = _installed_version()
        if not fnmatch.fnmatch(installed, check_version):
            message = "ROCm SDK version %s does not match the required %s" % (installed, check_version)
            if fail_on_version_mismatch:
                raise RocmSdkError(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
    names = list(preload_shortnames) + _split(os.environ.get("ROCM_SDK_PRELOAD_LIBRARIES", ""))
    mode = ctypes.RTLD_GLOBAL if rtld_global else ctypes.RTLD_LOCAL
    handles = []
    for path in find_libraries(*names):
        handles.append(ctypes.CDLL(path, mode=mode))
    return handles
