"""Expanding rocm-sdk-devel on first use, laid out as the reference's
rocm_sdk expects it.

The devel wheel ships `rocm_sdk_devel/_devel.tar` (a wheel cannot hold
symlinks) whose members sit under `_rocm_sdk_devel/`. Expansion extracts it
into site-packages beside the runtime packages, under a lock on the devel
RECORD: file symlinks become hardlinks (one inode, so a library is never
loaded twice under two paths), except the compiler driver links in
`_rocm_sdk_devel/bin/`; directory symlinks stay; every created path is added
to RECORD so `pip uninstall` removes it; the tar is deleted last. Expanded
means: `_rocm_sdk_devel/__init__.py` exists and the tar is gone.

Device wheels list their files in `.devel_links/<target>.json`; each is
hardlinked into the devel tree and recorded in that device wheel's RECORD.

The one public entry is the reference's: `get_devel_root()`, which expands
on first use and returns the tree as a pathlib.Path (ModuleNotFoundError
when rocm-sdk-devel is not installed). Everything else is private.
"""

import csv
import fcntl
import glob
import json
import os
import shutil
import tarfile

from . import _dist_info

KEEP_SYMLINKS = ("amdclang", "amdclang++", "amdclang-cl", "amdclang-cpp", "amdflang", "amdlld", "amdllvm")


class _DevelError(ImportError):
    pass


def _pure_dir():
    import importlib.util

    spec = importlib.util.find_spec("rocm_sdk_devel")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "rocm_sdk_devel module for the ROCm SDK development package is not installed. "
            "This can typically be obtained by installing `rocm[devel]` from your package manager"
        )
    return list(spec.submodule_search_locations)[0]


def _devel_dir():
    """Where the devel tree is (or will be) expanded."""
    return os.path.join(os.path.dirname(_pure_dir()), _dist_info.PACKAGES["devel"])


def _tar_path():
    for name in ("_devel.tar.xz", "_devel.tar"):
        p = os.path.join(_pure_dir(), name)
        if os.path.exists(p):
            return p
    return None


def _is_expanded():
    try:
        return os.path.exists(os.path.join(_devel_dir(), "__init__.py")) and _tar_path() is None
    except ImportError:
        return False


def _record_of(site, prefix):
    found = sorted(glob.glob(os.path.join(site, prefix + "-*.dist-info", "RECORD")))
    return found[0] if found else None


def _recorded(record):
    with open(record, newline="") as f:
        return {row[0] for row in csv.reader(f) if row}


def _safe(site, name):
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or parts[0] != _dist_info.PACKAGES["devel"]:
        raise _DevelError("refusing devel tar member %r: it would land outside %s" % (name, _dist_info.PACKAGES["devel"]))
    return os.path.join(site, *[p for p in parts if p not in ("", ".")])


def get_devel_root():
    """The expanded devel tree (a pathlib.Path), expanding it on first use
    and linking installed device packages' files into it every time."""
    import pathlib

    return pathlib.Path(_expand())


def _expand():
    """Expand the devel tree once; returns its directory."""
    target = _devel_dir()
    site = os.path.dirname(target)
    if _is_expanded():
        _reconcile_device_links()
        return target
    record = _record_of(site, "rocm_sdk_devel")
    if record is None:
        raise _DevelError("rocm-sdk-devel has no RECORD in %s: reinstall it with pip" % site)
    with open(record, "a", newline="") as rec:
        fcntl.lockf(rec, fcntl.LOCK_EX)
        try:
            tar_path = _tar_path()
            if tar_path is not None:
                _extract(site, tar_path, record, rec)
                os.unlink(tar_path)
        finally:
            fcntl.lockf(rec, fcntl.LOCK_UN)
    if not os.path.exists(os.path.join(target, "__init__.py")):
        raise _DevelError("expanding %s gave no package; reinstall rocm-sdk-devel" % target)
    _reconcile_device_links()
    return target


def _extract(site, tar_path, record, rec):
    known = _recorded(record)
    writer = csv.writer(rec, lineterminator="\n")
    cleaned = set()

    def clean(d):
        # Whatever an earlier, interrupted expansion or uninstall left is replaced.
        if d not in cleaned:
            cleaned.add(d)
            if os.path.lexists(d) and not os.path.islink(d):
                shutil.rmtree(d)

    links = []
    with tarfile.open(tar_path) as tar:
        for m in tar:
            dest = _safe(site, m.name)
            if m.isdir():
                clean(dest)
                os.makedirs(dest, exist_ok=True)
                continue
            clean(os.path.dirname(dest))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if m.name not in known:
                writer.writerow([m.name, "", ""])
            if m.isfile():
                src = tar.extractfile(m)
                with open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                os.chmod(dest, m.mode & 0o7777)
            elif m.issym():
                links.append((dest, m.linkname))
    rec.flush()
    # Links last, as symlinks first (a link may lead to another, or to a
    # file later in the tar), then file links become hardlinks.
    for dest, text in links:
        if os.path.lexists(dest):
            os.unlink(dest)
        os.symlink(text, dest)
    top = os.path.join(site, _dist_info.PACKAGES["devel"], "bin")
    for dest, _text in links:
        if os.path.dirname(dest) == top and os.path.basename(dest) in KEEP_SYMLINKS:
            continue
        real = os.path.realpath(dest)
        if not os.path.isfile(real):
            continue
        tmp = dest + ".hardlink"
        try:
            os.link(real, tmp)
        except OSError:
            continue  # another filesystem: the symlink still works
        os.replace(tmp, dest)


def _reconcile_device_links():
    """Hardlink every installed device package's files into the devel tree."""
    target = _devel_dir()
    site = os.path.dirname(target)
    for record in sorted(glob.glob(os.path.join(site, "rocm_sdk_device_*.dist-info", "RECORD"))):
        names = [row[0] for row in csv.reader(open(record, newline="")) if row]
        manifests = [n for n in names if "/.devel_links/" in n and n.endswith(".json")]
        added = []
        for m in manifests:
            with open(os.path.join(site, m)) as f:
                data = json.load(f)
            if data.get("version") != _dist_info.VERSION:
                continue
            for link in data.get("links", []):
                dest = os.path.join(target, link["relpath"])
                real = os.path.normpath(os.path.join(os.path.dirname(dest), link["target"]))
                if not os.path.isfile(real):
                    continue
                if not (os.path.isfile(dest) and not os.path.islink(dest) and os.path.samefile(dest, real)):
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    if os.path.lexists(dest):
                        os.unlink(dest)
                    os.link(real, dest)
                name = os.path.relpath(dest, site).replace(os.sep, "/")
                if name not in names:
                    added.append(name)
        if added:
            with open(record, "a", newline="") as f:
                fcntl.lockf(f, fcntl.LOCK_EX)
                csv.writer(f, lineterminator="\n").writerows([[n, "", ""] for n in added])
                fcntl.lockf(f, fcntl.LOCK_UN)
