"""Console scripts of rocm-sdk-core: each runs a program of the installed
SDK with the same arguments. Build tools run from the expanded devel tree
when rocm-sdk-devel is installed (expanding it on first use); system tools
(rocminfo, amd-smi...) run from the core package without expanding."""

import importlib.util
import os
import sys

from ._dist_info import PACKAGES, SCRIPTS


def _dir_of(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _root(expand):
    core = _dir_of(PACKAGES["core"])
    if core is None:
        sys.exit("rocm-sdk-core is not installed correctly: no %s package" % PACKAGES["core"])
    if importlib.util.find_spec("rocm_sdk_devel") is None:
        return core
    try:
        from rocm_sdk import _devel
    except ImportError:
        return core
    if _devel.is_expanded():
        return _devel.devel_dir()
    if not expand:
        return core
    try:
        return _devel.expand()
    except Exception as e:  # the tool still runs from core
        print("WARNING: cannot expand rocm-sdk-devel (%s); running from the core package" % e, file=sys.stderr)
        return core


def _run(relpath, expand):
    root = _dir_of(PACKAGES["core"]) if relpath == "bin/hipcc" else _root(expand)
    path = os.path.join(root, relpath)
    os.execv(path, [path] + sys.argv[1:])


def _make(relpath, expand):
    return lambda: _run(relpath, expand)


for _name, (_relpath, _expand) in SCRIPTS.items():
    globals()[_name] = _make(_relpath, _expand)
