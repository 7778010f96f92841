"""Console scripts of rocm-sdk-core: each runs a program of the installed
SDK with the same arguments. Build tools run from the expanded devel tree
when rocm-sdk-devel is installed (expanding it on first use); system tools
(rocminfo, amd-smi...) run from the core package without expanding.

This file ships in the core wheel, which must work under either `rocm`
selector (quarry's or the reference's): it uses no `rocm_sdk` function,
only the command both define, `python -m rocm_sdk init --quiet`, as the
reference's own trampoline does."""

import importlib.util
import os
import subprocess
import sys

from ._dist_info import PACKAGES, SCRIPTS


def _dir_of(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _expanded_devel():
    """The expanded devel tree, or None: expansion writes its `__init__.py`
    and deletes the tar last, so a half-done one does not count."""
    devel, pure = _dir_of(PACKAGES["devel"]), _dir_of("rocm_sdk_devel")
    if devel is None or not os.path.isfile(os.path.join(devel, "__init__.py")):
        return None
    if pure and any(os.path.exists(os.path.join(pure, t)) for t in ("_devel.tar", "_devel.tar.xz")):
        return None
    return devel


def _root(expand):
    core = _dir_of(PACKAGES["core"])
    if core is None:
        sys.exit("rocm-sdk-core is not installed correctly: no %s package" % PACKAGES["core"])
    if importlib.util.find_spec("rocm_sdk_devel") is None:
        return core
    devel = _expanded_devel()
    if devel is not None or not expand:
        return devel or core
    try:
        subprocess.check_call([sys.executable, "-m", "rocm_sdk", "init", "--quiet"])
    except (OSError, subprocess.CalledProcessError):
        print(
            "ERROR: Failed to expand rocm[devel] package. Try running `rocm-sdk init` manually for details.",
            file=sys.stderr,
        )
        sys.exit(1)
    importlib.invalidate_caches()
    devel = _expanded_devel()
    if devel is None:
        print("WARNING: Failed to import devel module, falling back to core.", file=sys.stderr)
        return core
    return devel


def _run(relpath, expand):
    root = _dir_of(PACKAGES["core"]) if relpath == "bin/hipcc" else _root(expand)
    path = os.path.join(root, relpath)
    os.execv(path, [path] + sys.argv[1:])


def _make(relpath, expand):
    return lambda: _run(relpath, expand)


for _name, (_relpath, _expand) in SCRIPTS.items():
    globals()[_name] = _make(_relpath, _expand)
