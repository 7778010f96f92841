"""Console scripts of rocm-profiler: run the profiler tools with the
package's libraries (and core's system libraries) on LD_LIBRARY_PATH and
rocprofiler-compute's modules on PYTHONPATH."""

import importlib.util
import os
import sys

from ._dist_info import PACKAGES, PROFILER_SCRIPTS


def _dir_of(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _prepend(var, paths):
    old = [p for p in os.environ.get(var, "").split(":") if p]
    new = [p for p in paths if os.path.isdir(p) and p not in old]
    if new:
        os.environ[var] = ":".join(new + old)


def _run(relpath):
    root = _dir_of(PACKAGES["profiler"])
    if root is None:
        sys.exit("rocm-profiler is not installed correctly: no %s package" % PACKAGES["profiler"])
    libs = [os.path.join(root, "lib")]
    core = _dir_of(PACKAGES["core"])
    if core:
        libs.append(os.path.join(core, "lib", "rocm_sysdeps", "lib"))
    _prepend("LD_LIBRARY_PATH", libs)
    _prepend("PYTHONPATH", [os.path.join(root, "libexec", "rocprofiler-compute")])
    path = os.path.join(root, relpath)
    if not os.path.exists(path):
        sys.exit("profiler tool not found: %s" % path)
    os.execv(path, [path] + sys.argv[1:])


def _make(relpath):
    return lambda: _run(relpath)


for _name, _relpath in PROFILER_SCRIPTS.items():
    globals()[_name] = _make(_relpath)
