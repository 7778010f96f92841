"""An in-tree PEP 517 backend (no setuptools needed) for a HIP extension built
against ROCm's Python packages: compiles hipscale/_native.hip for the targets
in PYTORCH_ROCM_ARCH (`;` or `,` separated) with the HIP compiler, taking
HIP's headers and libamdhip64 from ROCM_HOME (what `rocm-sdk path --root`
names; `quarry wheel build --rocm-packages` sets it), links with LDFLAGS
(as setuptools and CMake do: `quarry wheel build --split` and merge shards
pass a link script there), and writes the wheel with zipfile.

The compiler: HIPCXX if set, else `hipcc` when ROCM_HOME/bin has one (a
ROCm build whose packages carry the compiler), else `clang++` on PATH
(clang finds the AMDGPU device libraries through HIP_DEVICE_LIB_PATH).
"""
import base64
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile

NAME = "hipscale"
VERSION = "1.0"


def get_requires_for_build_wheel(config_settings=None):
    return []


def _compiler(rocm):
    if os.environ.get("HIPCXX"):
        return [os.environ["HIPCXX"], "-x", "hip", "--rocm-path=" + rocm]
    hipcc = os.path.join(rocm, "bin", "hipcc")
    if os.path.exists(hipcc):
        return [hipcc]
    clang = shutil.which("clang++")
    if clang is None:
        raise SystemExit("no HIP compiler: set HIPCXX, or use ROCm packages that carry hipcc, or put clang++ on PATH")
    return [clang, "-x", "hip", "--rocm-path=" + rocm]


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    archs = [a for a in os.environ.get("PYTORCH_ROCM_ARCH", "").replace(",", ";").split(";") if a]
    if not archs:
        raise SystemExit("PYTORCH_ROCM_ARCH is not set: say which GPU targets to build for")
    rocm = os.environ.get("ROCM_HOME")
    if not rocm:
        raise SystemExit("ROCM_HOME is not set: build with `quarry wheel build --rocm-packages DIR`")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    os.makedirs("build", exist_ok=True)
    so = os.path.join("build", "_native" + suffix)
    cmd = _compiler(rocm) + ["-O2", "-fPIC", "-shared", "-I" + sysconfig.get_paths()["include"]]
    cmd += ["--offload-arch=" + a for a in archs]
    cmd += ["-o", so, "hipscale/_native.hip", "-L" + os.path.join(rocm, "lib"), "-lamdhip64"]
    cmd += shlex.split(os.environ.get("LDFLAGS", ""))
    print(" ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    py = "cp%d%d" % sys.version_info[:2]
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    dist = "%s-%s.dist-info" % (NAME, VERSION)
    files = {
        NAME + "/__init__.py": open(os.path.join(NAME, "__init__.py"), "rb").read(),
        NAME + "/_native" + suffix: open(so, "rb").read(),
        dist + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (NAME, VERSION)).encode(),
        dist + "/WHEEL": ("Wheel-Version: 1.0\nGenerator: hipbackend\nRoot-Is-Purelib: false\nTag: %s-%s-%s\n" % (py, py, plat)).encode(),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(dist + "/RECORD,,")
    files[dist + "/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = "%s-%s-%s-%s-%s.whl" % (NAME, VERSION, py, py, plat)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel
