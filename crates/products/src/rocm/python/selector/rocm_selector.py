"""PEP 517 build backend of the `rocm` selector sdist.

It needs nothing but the standard library (no setuptools: an index without
setuptools, or `--no-index`, must still install `rocm`). At install time it
picks the target family (legacy mode) and pins every sibling package at
exactly this version.
"""

import base64
import hashlib
import os
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from rocm_sdk import _dist_info  # noqa: E402
from rocm_sdk import _targets  # noqa: E402

NAME = "rocm"
DATE = (1980, 1, 1, 0, 0, 0)


def _family():
    fam = os.environ.get("ROCM_SDK_TARGET_FAMILY")
    if fam:
        if _dist_info.FAMILIES and fam not in _dist_info.FAMILIES:
            raise RuntimeError(
                "ROCM_SDK_TARGET_FAMILY=%s is not built in this release; choose one of %s"
                % (fam, ", ".join(_dist_info.FAMILIES))
            )
        return fam
    return _targets.detected_family(_dist_info.FAMILIES) or _dist_info.DEFAULT_FAMILY


def _dist(name):
    return name.replace("_", "-")


def _device_target():
    """The target of the `device` extra: ROCM_SDK_TARGET_FAMILY, else a
    detected GPU's, else the first target (sorted)."""
    targets = _dist_info.DEVICE_TARGETS if _dist_info.SPLIT else _dist_info.FAMILIES
    env = os.environ.get("ROCM_SDK_TARGET_FAMILY")
    if env:
        return env
    for t in _targets.detected_targets():
        if t in targets:
            return t
    return sorted(targets)[0] if targets else ""


def _metadata():
    v = _dist_info.VERSION
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % NAME,
        "Version: %s" % v,
        "Summary: ROCm SDK: selects and pins the rocm-sdk packages for this machine",
        "Requires-Python: >=3.8",
        "Requires-Dist: %s==%s" % (_dist(_dist_info.DISTS["core"]), v),
    ]
    # The reference's extras, in its order.
    extras = []
    if _dist_info.SPLIT:
        extras.append(("libraries", [_dist_info.DISTS["libraries"]]))
    else:
        extras.append(("libraries", ["%s-%s" % (_dist_info.DISTS["libraries"], _family())]))
    # A build without device code (no per-target artifacts) has no device package to name.
    device = _device_target()
    if device:
        extras.append(("device", ["%s-%s" % (_dist_info.DISTS["device"], device)]))
    extras.append(("devel", [_dist_info.DISTS["devel"]]))
    if "profiler" in _dist_info.DISTS:
        extras.append(("profiler", [_dist_info.DISTS["profiler"]]))
    devices = ["%s-%s" % (_dist_info.DISTS["device"], t) for t in _dist_info.DEVICE_TARGETS]
    if len(devices) >= 2:
        for t, d in zip(_dist_info.DEVICE_TARGETS, devices):
            extras.append(("device-%s" % t, [d]))
        extras.append(("device-all", devices))
    for extra, dists in extras:
        lines.append("Provides-Extra: %s" % extra)
        for d in dists:
            lines.append('Requires-Dist: %s==%s ; extra == "%s"' % (_dist(d), v, extra))
    return "\n".join(lines) + "\n"


def _dist_info_dir():
    return "%s-%s.dist-info" % (NAME, _dist_info.VERSION)


def _wheel_files():
    files = []
    pkg = os.path.join(ROOT, "rocm_sdk")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                files.append(("rocm_sdk/" + name, f.read()))
    di = _dist_info_dir()
    files.append((di + "/METADATA", _metadata().encode()))
    files.append((di + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: rocm_selector\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    files.append((di + "/entry_points.txt", b"[console_scripts]\nrocm-sdk = rocm_sdk.__main__:main\n"))
    return files


def _hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=%s" % digest


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info_dir())
    os.makedirs(d, exist_ok=True)
    for name, data in _wheel_files():
        if name.startswith(_dist_info_dir() + "/"):
            with open(os.path.join(metadata_directory, name), "wb") as f:
                f.write(data)
    return _dist_info_dir()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "%s-%s-py3-none-any.whl" % (NAME, _dist_info.VERSION)
    files = _wheel_files()
    record = _dist_info_dir() + "/RECORD"
    rows = ["%s,%s,%d" % (n, _hash(d), len(d)) for n, d in files] + ["%s,," % record]
    files.append((record, ("\n".join(rows) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            info = zipfile.ZipInfo(n, DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name
