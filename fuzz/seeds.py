#!/usr/bin/env python3
"""Seed corpora for quarry's fuzz targets (fuzz/fuzz_targets), made here from
nothing but the C compiler, Python and the machine's own files, plus real
material the test suite cached when it is there (Debian's packages and
ROCm libraries, PyPI wheels): seeds.py OUT writes OUT/<target>/<name>.

Small synthetic seeds give each reader's format a start (an offload bundle,
a compressed bundle, a .kpack, a marker section, tars in every compression,
raw deflate streams); the real files are what users hand quarry.
"""
import gzip
import io
import lzma
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib

OUT = sys.argv[1]
CACHE = os.environ.get("QUARRY_TEST_CACHE") or os.path.expanduser("~/.cache/quarry-tests")
MAX = 4 << 20  # real files larger than this are left out: a fuzzer mutates small inputs best


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def copy_real(target, paths, limit):
    n = 0
    for p in sorted(paths):
        try:
            size = os.path.getsize(p)
        except OSError:
            continue
        if 0 < size <= MAX and n < limit:
            with open(p, "rb") as f:
                put(target, "real-%02d-%s" % (n, os.path.basename(p))[:100], f.read())
            n += 1


def walk(top, pred):
    for root, _, files in os.walk(top):
        for f in files:
            p = os.path.join(root, f)
            if pred(p):
                yield p


def elf_head(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


# A tiny msgpack encoder (maps, arrays, strings, ints): no dependency.
def mp(v):
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        return b"\xcf" + struct.pack(">Q", v) if v > 127 else bytes([v])
    if isinstance(v, str):
        b = v.encode()
        return (bytes([0xA0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)])) + b
    if isinstance(v, list):
        return bytes([0x90 | len(v)]) + b"".join(mp(x) for x in v)
    if isinstance(v, dict):
        return bytes([0x80 | len(v)]) + b"".join(mp(k) + mp(x) for k, x in v.items())
    raise TypeError(v)


def elves(tmp):
    """Small real ELF files from the C compiler: a library with a SONAME,
    RPATH and NEEDED, one with RUNPATH, an executable, a fake HIP binary
    (a `.hip_fatbin` section and a wrapper in `.hipFatBinSegment`)."""
    src = os.path.join(tmp, "x.c")
    with open(src, "w") as f:
        f.write("int answer(void) { return 42; }\nint main(void) { return answer() - 42; }\n")
    hip = os.path.join(tmp, "hip.c")
    with open(hip, "w") as f:
        f.write(
            '__attribute__((section(".hip_fatbin"), used)) const char fat[64] = "__CLANG_OFFLOAD_BUNDLE__";\n'
            "struct wrapper { unsigned magic, version; const void *bin; void *reserved; };\n"
            '__attribute__((section(".hipFatBinSegment"), used)) const struct wrapper w = {0x48495046, 1, fat, 0};\n'
            "int f(void) { return w.magic != 0; }\n"
        )
    out = []
    for name, args in [
        ("lib-rpath.so", ["-shared", "-fPIC", "-Wl,-soname,libx.so.1", "-Wl,--disable-new-dtags,-rpath,/opt/x/lib", "-lm", src]),
        ("lib-runpath.so", ["-shared", "-fPIC", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib", src]),
        ("exe", [src]),
        ("libhip-fake.so", ["-shared", "-fPIC", hip]),
    ]:
        dest = os.path.join(tmp, name)
        if subprocess.run(["cc", "-O1", "-o", dest] + args, capture_output=True).returncode == 0:
            with open(dest, "rb") as f:
                out.append((name, f.read()))
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="quarry-seeds-")
    try:
        # ELF readers and editors.
        for name, data in elves(tmp):
            for t in ["elf_read", "elf_edit", "kpack_ref", "kpack_marker"]:
                put(t, name, data)
        system = [p for p in ["/usr/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libffi.so.8", "/bin/true"] if os.path.exists(p)]
        for t in ["elf_read", "elf_edit"]:
            copy_real(t, [os.path.realpath(p) for p in system], 3)
        fixtures = os.path.join(CACHE, "fixtures")
        hip = [p for p in walk(fixtures, lambda p: p.endswith(".so") or "/hip-" in p) if elf_head(p)] if os.path.isdir(fixtures) else []
        for t in ["elf_read", "kpack_ref", "kpack_marker", "offload_bundle"]:
            copy_real(t, hip, 8)

        # A marker section as `wheel split` writes it, in an object file.
        marker = mp({"kpack_search_paths": ["../.kpack/x_@GFXARCH@.kpack"], "kernel_name": "lib/libx.so"})
        mpath = os.path.join(tmp, "marker.bin")
        with open(mpath, "wb") as f:
            f.write(marker)
        lib = os.path.join(tmp, "lib-rpath.so")
        if os.path.exists(lib):
            withm = os.path.join(tmp, "lib-marker.so")
            if subprocess.run(["objcopy", "--add-section", ".rocm_kpack_ref=" + mpath, lib, withm], capture_output=True).returncode == 0:
                with open(withm, "rb") as f:
                    put("kpack_marker", "lib-marker.so", f.read())

        # Offload bundles: plain (two entries) and compressed (CCOB v2, zlib).
        code = b"\x7fELF" + b"\0" * 60
        ids = [b"host-x86_64-unknown-linux-gnu-", b"hipv4-amdgcn-amd-amdhsa--gfx942"]
        header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids))
        entries_len = sum(24 + len(i) for i in ids)
        at = len(header) + entries_len
        entries = b""
        payload = b""
        for i, ident in enumerate(ids):
            body = b"" if i == 0 else code
            entries += struct.pack("<QQQ", at + len(payload), len(body), len(ident)) + ident
            payload += body
        plain = header + entries + payload
        put("offload_bundle", "plain.bundle", plain)
        packed = zlib.compress(plain)
        ccob = b"CCOB" + struct.pack("<HHIIQ", 2, 1, 24 + len(packed), len(plain), 0) + packed
        put("offload_bundle", "compressed-v2.bundle", ccob)

        # .kpack: header, one zstd frame per kernel (a stored frame here), the table.
        kernel = code
        frame = b"\x28\xb5\x2f\xfd" + bytes([0x20, len(kernel)]) + bytes([0x01, 0, 0]) + kernel
        blob = struct.pack("<I", 1) + struct.pack("<I", len(frame)) + frame
        zstd_offset = 16
        toc = {
            "format_version": 1,
            "group_name": "x",
            "gfx_arch_family": "gfx942",
            "gfx_arches": ["gfx942"],
            "compression_scheme": "zstd-per-kernel",
            "zstd_offset": zstd_offset,
            "zstd_size": len(blob),
            "toc": {"lib/libfuzz.so#0": {"gfx942": {"type": "hsaco", "ordinal": 0, "original_size": len(kernel)}}},
        }
        table = mp(toc)
        kpack = b"KPAK" + struct.pack("<I", 1) + struct.pack("<Q", zstd_offset + len(blob)) + blob + table
        put("kpack_read", "one-kernel.kpack", kpack)

        # Wheels: one written here, real ones from the corpus the tests fetched.
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("fuzz/__init__.py", "x = 1\n" * 50)
            z.writestr("fuzz-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr("fuzz-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fuzz\nVersion: 1.0\n")
            z.writestr("fuzz-1.0.dist-info/RECORD", "")
        put("zip_read", "written.whl", buf.getvalue())
        put("tar_read", "written.zip", buf.getvalue())
        wheels = list(walk(CACHE, lambda p: p.endswith(".whl"))) if os.path.isdir(CACHE) else []
        copy_real("zip_read", wheels, 12)

        # Raw deflate streams, each after the CRC the walker expects.
        for i, data in enumerate([b"", b"a" * 1000, os.urandom(3000), bytes(range(256)) * 40]):
            for level in (1, 9):
                c = zlib.compressobj(level, zlib.DEFLATED, -15)
                stream = c.compress(data) + c.flush()
                put("deflate_walk", "stream-%d-%d" % (i, level), struct.pack("<I", zlib.crc32(data)) + stream)

        # Tars in every compression, with the entries readers must judge.
        t = io.BytesIO()
        with tarfile.open(fileobj=t, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for name, kind in [("dir/", tarfile.DIRTYPE), ("dir/file", tarfile.REGTYPE), ("dir/link", tarfile.SYMTYPE), ("dir/hard", tarfile.LNKTYPE), ("x" * 150, tarfile.REGTYPE)]:
                ti = tarfile.TarInfo(name.rstrip("/"))
                ti.type = kind
                if kind == tarfile.SYMTYPE:
                    ti.linkname = "file"
                if kind == tarfile.LNKTYPE:
                    ti.linkname = "dir/file"
                data = b"content\n" if kind == tarfile.REGTYPE else b""
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
        raw = t.getvalue()
        put("tar_read", "plain.tar", raw)
        put("tar_read", "gz.tar.gz", gzip.compress(raw))
        put("tar_read", "xz.tar.xz", lzma.compress(raw))
        if shutil.which("zstd"):
            z = subprocess.run(["zstd", "-q", "-c"], input=raw, capture_output=True).stdout
            put("tar_read", "zst.tar.zst", z)

        # .deb files: Debian's own, from the packages the tests fetched.
        debs = os.path.join(CACHE, "packages-cache", "debs")
        real = [os.path.join(debs, f) for f in os.listdir(debs)] if os.path.isdir(debs) else []
        real = sorted(real, key=lambda p: os.path.getsize(p))[:20]
        copy_real("deb_read", real, 20)
        apt = "/var/cache/apt/archives"
        if os.path.isdir(apt):
            copy_real("deb_read", [os.path.join(apt, f) for f in os.listdir(apt) if f.endswith(".deb")], 10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for t in sorted(os.listdir(OUT)):
        print("%-16s %3d seeds" % (t, len(os.listdir(os.path.join(OUT, t)))))


main()
