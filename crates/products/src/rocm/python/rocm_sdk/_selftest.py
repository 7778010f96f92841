"""`rocm-sdk test`: checks that need no GPU, each in a subprocess where a
crash must not take the checker down. Tools that need a GPU are not run."""

import os
import subprocess
import sys

from . import _dist_info


def _is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _shared_objects(base):
    for root, _dirs, files in os.walk(base):
        for name in sorted(files):
            path = os.path.join(root, name)
            if ".so" in name and not os.path.islink(path) and _is_elf(path):
                yield path


def run(out=sys.stdout):
    import rocm_sdk

    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        out.write("%s  %s%s\n" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""))

    try:
        from importlib.metadata import version

        installed = version("rocm-sdk-core")
    except Exception:  # not installed by pip: nothing to compare
        installed = rocm_sdk.__version__
    check("version", installed == rocm_sdk.__version__, "rocm_sdk %s, rocm-sdk-core %s" % (rocm_sdk.__version__, installed))
    core = rocm_sdk._package_dir("core")
    check("core package installed", core is not None and os.path.isdir(core), str(core))
    libs = rocm_sdk._package_dir("libraries")
    dirs = [d for d in (core, libs) if d]
    for d in dirs:
        for so in _shared_objects(d):
            code = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"
            env = dict(os.environ)
            env.pop("LD_LIBRARY_PATH", None)
            p = subprocess.run([sys.executable, "-c", code, so], capture_output=True, text=True, env=env)
            check("loads " + os.path.relpath(so, os.path.dirname(d)), p.returncode == 0, p.stderr.strip()[-300:])
    for short in sorted(_dist_info.LIBRARIES):
        kind, rel = _dist_info.LIBRARIES[short]
        if rel is None or kind == "devel" or rocm_sdk._package_dir(kind) is None:
            continue
        try:
            rocm_sdk.find_libraries(short)
            check("find_libraries(%r)" % short, True)
        except Exception as e:  # report, keep going
            check("find_libraries(%r)" % short, False, str(e))
    for rel, text in sorted(_dist_info.LAUNCHERS.items()):
        path = os.path.join(core or "", rel)
        real = os.path.normpath(os.path.join(os.path.dirname(path), text))
        check("launcher %s -> %s" % (rel, text), os.access(path, os.X_OK) and os.access(real, os.X_OK))
    import importlib.util

    if importlib.util.find_spec("rocm_sdk_devel") is not None:
        from . import _devel

        try:
            root = str(_devel.get_devel_root())
            check("devel expanded", _devel._is_expanded() and os.path.isdir(os.path.join(root, "include")), root)
        except Exception as e:
            check("devel expanded", False, str(e))
    gpu = os.path.exists("/dev/kfd")
    out.write("SKIP  GPU tools (%s)\n" % ("not run by the self test" if gpu else "no /dev/kfd on this machine"))
    failed = results.count(False)
    out.write("%d passed, %d failed\n" % (len(results) - failed, failed))
    return 0 if failed == 0 else 1
