#!/usr/bin/env python3
"""The baseline `benches/rocm_package.sh` compares `quarry rocm package` with.

It does the reference packager's per-file work on the same artifacts
directory, as the reference does it (build_python_packages.py +
py_packaging.py, then setuptools' bdist_wheel), single-threaded:

- every file of every artifact is copied into a package staging tree
  (shutil.copy2, symlinks kept as links), runtime components into one tree,
  `dev`/`doc` components into the devel tree;
- one patchelf call per ELF executable or shared object of the runtime tree
  (`--force-rpath --set-rpath`), not for .co/.hsaco device code;
- the devel tree goes into an uncompressed tar (tarfile), as `_devel.tar`;
- bdist_wheel copies the staged tree again into its build directory and
  writes the wheel with Python's zipfile, ZIP_DEFLATED at zlib's default
  level (6: bdist_wheel passes no compresslevel), hashing every member for
  RECORD.

usage: rocm_package_baseline.py ARTIFACT_DIR OUT_DIR PATCHELF
OUT_DIR is removed at the end (only the time and memory matter).
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

RPATH = "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib:$ORIGIN/../../_rocm_sdk_core/lib/rocm_sysdeps/lib"


def is_elf_program_or_library(path):
    with open(path, "rb") as fh:
        head = fh.read(18)
    return len(head) == 18 and head[:4] == b"\x7fELF" and head[16] in (2, 3)


def stage(root, out):
    runtime, devel = os.path.join(out, "runtime"), os.path.join(out, "devel")
    for art in sorted(os.listdir(root)):
        d = os.path.join(root, art)
        manifest = os.path.join(d, "artifact_manifest.txt")
        if not os.path.isfile(manifest):
            continue
        component = art.split("_")[1] if art.count("_") >= 2 else "lib"
        into = devel if component in ("dev", "doc") else runtime
        for prefix in open(manifest).read().split():
            src = os.path.join(d, prefix)
            if os.path.isdir(src):
                shutil.copytree(src, into, symlinks=True, dirs_exist_ok=True)
    return runtime, devel


def patch(tree, patchelf):
    for d, _, files in os.walk(tree):
        for f in files:
            p = os.path.join(d, f)
            if os.path.islink(p) or p.endswith((".co", ".hsaco")):
                continue
            if is_elf_program_or_library(p):
                os.chmod(p, 0o755)
                subprocess.check_call([patchelf, "--force-rpath", "--set-rpath", RPATH, p])


def write_wheel(tree, out, name):
    # bdist_wheel: build/bdist.* copy, then zipfile with a RECORD hash per member.
    build = os.path.join(out, "build-" + name)
    shutil.copytree(tree, build, symlinks=False)
    record = []
    with zipfile.ZipFile(os.path.join(out, name + ".whl"), "w", zipfile.ZIP_DEFLATED) as z:
        for d, dirs, files in os.walk(build):
            dirs.sort()
            for f in sorted(files):
                p = os.path.join(d, f)
                data = open(p, "rb").read()
                rel = os.path.relpath(p, build)
                record.append("%s,sha256=%s,%d" % (rel, hashlib.sha256(data).hexdigest(), len(data)))
                z.writestr(rel, data)
        z.writestr("RECORD", "\n".join(record))
    shutil.rmtree(build)


def main():
    root, out, patchelf = sys.argv[1:4]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    runtime, devel = stage(root, out)
    patch(runtime, patchelf)
    write_wheel(runtime, out, "runtime")
    devel_pkg = os.path.join(out, "devel-pkg", "rocm_sdk_devel")
    os.makedirs(devel_pkg)
    with tarfile.open(os.path.join(devel_pkg, "_devel.tar"), "w") as t:
        t.add(devel, arcname="_rocm_sdk_devel")
    write_wheel(os.path.dirname(devel_pkg), out, "devel")
    shutil.rmtree(out)


if __name__ == "__main__":
    main()
