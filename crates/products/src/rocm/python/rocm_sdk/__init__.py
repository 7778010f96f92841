"""rocm_sdk: find and load the ROCm libraries installed by the rocm packages.

Written for quarry's ROCm packaging, to the public contract of the
reference's `rocm_sdk` (ROCm's own packaging): the same public functions,
arguments, return types, exceptions, environment variables and messages,
so code written against either works with both. The package data
(_dist_info) is generated at packaging time: the version, the sibling
package directories and where each library lives under its SONAME.

Public: `__version__`, `find_libraries`, `preload_libraries`,
`initialize_process`. Environment: `ROCM_SDK_TARGET_FAMILY`,
`ROCM_SDK_PRELOAD_LIBRARIES`, `ROCM_SDK_VERBOSE`.
"""

import importlib.util
import os
import re
from pathlib import Path

from . import _dist_info

__version__ = _dist_info.VERSION

__all__ = [
    "__version__",
    "find_libraries",
    "initialize_process",
]

# Handles of preloaded libraries by short name (as the reference keeps them).
_ALL_CDLLS = {}

_CACHED_TARGET_FAMILY = None


def _available_target_families():
    return list(_dist_info.FAMILIES) + [t for t in _dist_info.TARGETS if t not in _dist_info.FAMILIES]


def _target_family():
    """ROCM_SDK_TARGET_FAMILY, else the detected GPU's family, else the
    default; a family this release lacks is a ValueError (as the reference)."""
    global _CACHED_TARGET_FAMILY
    if _CACHED_TARGET_FAMILY is not None:
        return _CACHED_TARGET_FAMILY
    from . import _targets

    family = os.environ.get("ROCM_SDK_TARGET_FAMILY")
    if family is None:
        family = _targets.detected_family(_dist_info.FAMILIES) or _dist_info.DEFAULT_FAMILY
    available = _available_target_families()
    if available and family not in available:
        raise ValueError(
            "Requested ROCM_SDK_TARGET_FAMILY=%s is not available in the distribution (available: %s)"
            % (family, ", ".join(available))
        )
    _CACHED_TARGET_FAMILY = family
    return family


def _import_name(kind):
    """The import name of the installed package `kind` (core, libraries...)."""
    if kind == "libraries" and not _dist_info.SPLIT:
        return "_rocm_sdk_libraries_%s%s" % (_target_family().replace("-", "_"), _dist_info.SUFFIX)
    return _dist_info.PACKAGES.get(kind)


def _package_dir(kind):
    """The directory of the installed package `kind`, or None."""
    name = _import_name(kind)
    spec = importlib.util.find_spec(name) if name else None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def find_libraries(*shortnames):
    """Absolute paths (pathlib.Path) of libraries by short name (`amdhip64`,
    `hipblas`...).

    Raises ModuleNotFoundError for a name the SDK does not know or when a
    package providing a requested library is not installed (naming the
    `rocm[...]` extra to install), FileNotFoundError when an installed
    package lacks the library.
    """
    paths = []
    missing_extras = []
    for shortname in shortnames:
        entry = _dist_info.LIBRARIES.get(shortname)
        if entry is None:
            raise ModuleNotFoundError(
                "Unknown rocm library '%s' (known: %s)" % (shortname, ", ".join(sorted(_dist_info.LIBRARIES)))
            )
        kind, rel = entry
        base = _package_dir(kind)
        if base is None:
            if kind not in missing_extras:
                missing_extras.append(kind)
            continue
        if rel is None:
            raise FileNotFoundError("Could not find rocm library '%s': it is not part of this ROCm build" % shortname)
        path = Path(base) / rel
        if not path.exists():
            raise FileNotFoundError("Could not find rocm library '%s' at path '%s'" % (shortname, path))
        paths.append(path)
    if missing_extras:
        raise ModuleNotFoundError(
            "Missing required rocm libraries. Please refer to Python setup instructions, reinstall your "
            "virtual environment, or attempt to install manually via `pip install rocm[%s]`" % ",".join(missing_extras)
        )
    return paths


def preload_libraries(*shortnames, rtld_global=True):
    """Load libraries by short name once per process, keeping their handles,
    so later loads of libraries that need them resolve by name."""
    import ctypes

    mode = ctypes.RTLD_GLOBAL if rtld_global is True else ctypes.RTLD_LOCAL
    for shortname in shortnames:
        if shortname in _ALL_CDLLS:
            continue
        paths = find_libraries(shortname)
        if paths:
            _ALL_CDLLS[shortname] = ctypes.CDLL(str(paths[0]), mode=mode)


def initialize_process(
    *,
    preload_shortnames=None,
    rtld_global=True,
    env_override=True,
    check_version=None,
    fail_on_version_mismatch=False,
    **kwargs
):
    """Initialise a process that uses ROCm native libraries from these packages.

    preload_shortnames: short names for preload_libraries. rtld_global:
    load them RTLD_GLOBAL (default). env_override: also preload what
    `ROCM_SDK_PRELOAD_LIBRARIES` lists (comma or semicolon separated).
    check_version: a version pattern (`*` matches anything) or a compiled
    regular expression matched against `__version__`: a mismatch warns, or
    raises RuntimeError with fail_on_version_mismatch.
    """
    if preload_shortnames:
        preload_libraries(*preload_shortnames, rtld_global=rtld_global)
    if env_override:
        listed = os.getenv("ROCM_SDK_PRELOAD_LIBRARIES")
        if listed is not None:
            names = [s.strip() for s in re.split("[,;]", listed) if s.strip()]
            if names:
                try:
                    preload_libraries(*names, rtld_global=rtld_global)
                except Exception as e:
                    raise RuntimeError(
                        "Could not preload libraries from environment variable ROCM_SDK_PRELOAD_LIBRARIES='%s'. "
                        "Check this environment variable and unset it if not correct/needed." % listed
                    ) from e
    if check_version:
        if isinstance(check_version, re.Pattern):
            pattern, shown = check_version, check_version.pattern
        else:
            shown = re.escape(check_version).replace("\\*", ".*")
            pattern = re.compile("^%s$" % shown)
        if not re.match(pattern, __version__):
            message = (
                "The program was compiled against a ROCm version matching '%s' but the installed ROCm "
                "version in this Python environment is %s." % (shown, __version__)
            )
            if fail_on_version_mismatch:
                raise RuntimeError(message)
            import warnings

            warnings.warn(message + " This incompatibility may result in unexpected behavior")
