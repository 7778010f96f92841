"""Expanding the devel package's tar on first use.

A wheel cannot hold symlinks, so rocm-sdk-devel ships its tree as one tar.
It is expanded in place under a file lock; file symlinks become hardlinks
(so no duplicate copies of a library end up loaded twice), except links
into the LLVM driver directory, which clang resolves through its own path;
directory symlinks stay. Every created path is appended to the package's
RECORD so `pip uninstall` removes it.
"""

import csv
import fcntl
import glob
import os
import tarfile

MARKER = ".rocm_sdk_expanded"
LOCK = ".expand.lock"


class DevelError(RuntimeError):
    pass


def _safe_name(name):
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        raise DevelError("refusing devel tar member %r: it would land outside the package" % name)
    return os.path.join(*[p for p in parts if p not in ("", ".")])


def _record_file(base):
    site = os.path.dirname(base)
    found = glob.glob(os.path.join(site, "rocm_sdk_devel-*.dist-info", "RECORD"))
    return found[0] if found else None


def _keep_as_symlink(rel, target_rel):
    return target_rel.startswith("lib/llvm/bin/") or rel.startswith("lib/llvm/bin/")


def expand(base):
    """Expand `<base>/_devel.tar` into `base` once; returns `base`."""
    marker = os.path.join(base, MARKER)
    if os.path.exists(marker):
        return base
    tar_path = None
    for name in ("_devel.tar", "_devel.tar.xz"):
        if os.path.exists(os.path.join(base, name)):
            tar_path = os.path.join(base, name)
    if tar_path is None:
        raise DevelError("%s has no _devel.tar: reinstall rocm-sdk-devel" % base)
    with open(os.path.join(base, LOCK), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(marker):
            return base
        created = []
        links = []
        with tarfile.open(tar_path) as tar:
            for m in tar:
                rel = _safe_name(m.name)
                dest = os.path.join(base, rel)
                if m.isdir():
                    os.makedirs(dest, exist_ok=True)
                elif m.isfile():
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    src = tar.extractfile(m)
                    tmp = dest + ".partial"
                    with open(tmp, "wb") as out:
                        while True:
                            chunk = src.read(1 << 20)
                            if not chunk:
                                break
                            out.write(chunk)
                    os.chmod(tmp, m.mode & 0o7777)
                    os.replace(tmp, dest)
                    created.append(rel)
                elif m.issym() or m.islnk():
                    links.append((rel, m))
        # Links last: their targets may come later in the tar, and a link
        # may lead to another link, so every link exists before any is
        # turned into a hardlink.
        for rel, m in links:
            dest = os.path.join(base, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.lexists(dest):
                os.unlink(dest)
            if m.islnk():
                os.link(os.path.join(base, _safe_name(m.linkname)), dest)
            else:
                os.symlink(m.linkname, dest)
            created.append(rel)
        # File symlinks become hardlinks to the file at the end of the chain
        # (one inode, so a library is never loaded twice under two paths);
        # directory symlinks and the compiler driver links stay.
        for rel, m in links:
            if not m.issym():
                continue
            dest = os.path.join(base, rel)
            lexical = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(dest), m.linkname)), base)
            real = os.path.realpath(dest)
            if not os.path.isfile(real) or _keep_as_symlink(rel, lexical):
                continue
            tmp = dest + ".hardlink"
            try:
                os.link(real, tmp)
            except OSError:
                continue  # another filesystem: the symlink still works
            os.replace(tmp, dest)
        with open(marker, "w") as f:
            f.write("expanded from %s\n" % os.path.basename(tar_path))
        created.append(MARKER)
        created.append(LOCK)
        record = _record_file(base)
        if record:
            pkg = os.path.basename(base)
            with open(record, "a", newline="") as f:
                writer = csv.writer(f, lineterminator="\n")
                for rel in created:
                    writer.writerow(["%s/%s" % (pkg, rel.replace(os.sep, "/")), "", ""])
    return base
