#!/usr/bin/env python3
"""Compare `quarry wheel split`'s output with the reference splitter's
(ROCm's rocm_kpack.tools.split_python_wheels) on the same fat wheel.

usage: wheel_split_compare.py FAT.whl QUARRY_OUT_DIR REFERENCE_OUT_DIR
       wheel_split_compare.py FAT.whl QUARRY_OUT_DIR -
  (`-`: no reference output, e.g. where the reference fails: quarry's
  archives are checked against the input alone, every kernel of every
  archive decoded and compared with the code object its wrapper registered)
Needs msgpack and zstandard (benches/wheel_split.sh runs it in its venv).

Checks, printing one line per finding:
- the same set of wheel names;
- METADATA: the same Provides-Extra / Requires-Dist lines (as sets), per wheel;
- every .kpack: the same table of contents (binary keys, targets, ordinals,
  original sizes, group, gfx_arches); every kernel decoded from both is
  byte-identical between the two and to the code object in the fat wheel;
- every host binary, field by field: the .rocm_kpack_ref marker (bytes and
  decoded), each wrapper's magic, version, index and pointer (after its
  relocation) and .hip_fatbin's section type (NOBITS);
- RECORD hash encoding.
Differences known to be by design are printed as "by design: ..." with the
reason; anything else as "DIFFERS: ...". Exit status 1 on an unexplained
difference (or a kernel that is not the original), else 0.
"""

import base64
import hashlib
import io
import struct
import sys
import zipfile
import zlib

import msgpack
import zstandard

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
problems = []


def differs(msg):
    problems.append(msg)
    print("DIFFERS: " + msg)


def by_design(msg):
    print("by design: " + msg)


# --- ELF -------------------------------------------------------------------


class Elf:
    """Just what is needed of a little-endian ELF64: sections by name, RELA
    relocations, and reading at a virtual address."""

    def __init__(self, data):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not an ELF64 LE file")
        self.data = data
        (self.e_type,) = struct.unpack_from("<H", data, 16)
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        phoff, = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        self.phdrs = [struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize) for i in range(phnum)]
        raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        strtab = raw[shstrndx]
        names = data[strtab[4]:strtab[4] + strtab[5]]
        self.sections = {}
        self.list = []
        for s in raw:
            name = names[s[0]:names.index(b"\0", s[0])].decode()
            sec = dict(name=name, type=s[1], flags=s[2], addr=s[3], offset=s[4], size=s[5], link=s[6], entsize=s[9])
            self.list.append(sec)
            self.sections.setdefault(name, sec)

    def body(self, name):
        s = self.sections[name]
        return self.data[s["offset"]:s["offset"] + s["size"]]

    def relocations(self):
        """{r_offset: (type, sym, addend)} of every SHT_RELA section (first wins)."""
        out = {}
        for s in self.list:
            if s["type"] != 4:
                continue
            for i in range(s["size"] // 24):
                off, info, addend = struct.unpack_from("<QQq", self.data, s["offset"] + i * 24)
                out.setdefault(off, (info & 0xFFFFFFFF, info >> 32, addend))
        return out

    def symbol_value(self, dynsym_index):
        s = self.sections.get(".dynsym")
        if s is None:
            return None
        value, = struct.unpack_from("<Q", self.data, s["offset"] + dynsym_index * 24 + 8)
        return value

    def pointer_at(self, vaddr, relocs):
        """The 8-byte pointer stored at `vaddr` as the loader sees it (relative to the load base)."""
        for p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ in self.phdrs:
            if p_type == 1 and p_vaddr <= vaddr < p_vaddr + p_filesz:
                inplace, = struct.unpack_from("<Q", self.data, p_offset + vaddr - p_vaddr)
                break
        else:
            raise ValueError("0x%x is in no PT_LOAD's file bytes" % vaddr)
        r = relocs.get(vaddr)
        if r is None:
            return inplace, "in place"
        rtype, sym, addend = r
        if rtype == 8:  # R_X86_64_RELATIVE
            return addend, "RELATIVE"
        if rtype == 1:  # R_X86_64_64
            return (self.symbol_value(sym) or 0) + addend, "R_X86_64_64"
        return inplace, "reloc type %d" % rtype


WRAPPER = 24


def wrappers(elf):
    seg = elf.sections[".hipFatBinSegment"]
    relocs = elf.relocations()
    out = []
    body = elf.body(".hipFatBinSegment")
    for i in range(len(body) // WRAPPER):
        magic, version = struct.unpack_from("<II", body, i * WRAPPER)
        index, = struct.unpack_from("<Q", body, i * WRAPPER + 16)
        ptr, how = elf.pointer_at(seg["addr"] + i * WRAPPER + 8, relocs)
        out.append(dict(magic=body[i * WRAPPER:i * WRAPPER + 4], version=version, index=index, ptr=ptr, how=how))
    return out


# --- bundles ------------------------------------------------------------------


def parse_bundle(buf, at):
    """Entries [(id, bytes)] of the uncompressed bundle at `at`, and its end."""
    n, = struct.unpack_from("<Q", buf, at + 24)
    pos, end, entries = at + 32, at + 32, []
    for _ in range(n):
        off, size, idlen = struct.unpack_from("<QQQ", buf, pos)
        ident = buf[pos + 24:pos + 24 + idlen].decode()
        pos += 24 + idlen
        entries.append((ident, bytes(buf[at + off:at + off + size])))
        end = max(end, at + off + size, pos)
    return entries, end


def parse_ccob(buf, at):
    """Entries of the compressed bundle at `at` (CCOB v2/v3, zstd or zlib), and its end."""
    ver_method, = struct.unpack_from("<I", buf, at + 4)
    version, method = ver_method & 0xFFFF, ver_method >> 16
    if version >= 3:
        total, _, _ = struct.unpack_from("<QQQ", buf, at + 8)
        hdr = 32
    elif version == 2:
        total, _, _ = struct.unpack_from("<IIQ", buf, at + 8)
        hdr = 24
    else:  # v1: no total size, the rest of the section
        hdr, total = 24, len(buf) - at
    payload = bytes(buf[at + hdr:at + total])
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(payload) if method == 1 else zlib.decompress(payload)
    entries = []
    p = 0
    while p < len(raw) and raw[p:p + 24] == BUNDLE_MAGIC:
        e, end = parse_bundle(raw, p)
        entries += e
        p = (end + 7) & ~7
        while p < len(raw) and raw[p:p + 24] != BUNDLE_MAGIC:
            p += 1
    return entries, at + total


def bundle_at(buf, at):
    if buf[at:at + 24] == BUNDLE_MAGIC:
        return parse_bundle(buf, at)
    if buf[at:at + 4] == CCOB_MAGIC:
        return parse_ccob(buf, at)
    raise ValueError("no bundle at 0x%x" % at)


def arch_of(ident):
    """`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+` -> `gfx90a:xnack+`; host entries -> None."""
    if ident.startswith("host") or "--" not in ident:
        return None
    return ident.rsplit("--", 1)[1]


def original_code(elf):
    """The fat binary's code objects: by wrapper ({i: {arch: bytes}}) as the
    runtime registers them, and in bundle order ({arch: [bytes...]}) as the
    reference numbers them."""
    fat = elf.sections[".hip_fatbin"]
    buf = elf.body(".hip_fatbin")
    by_wrapper = {}
    for i, w in enumerate(wrappers(elf)):
        if w["magic"] != b"FPIH":
            raise ValueError("wrapper %d has magic %r" % (i, w["magic"]))
        entries, _ = bundle_at(buf, w["ptr"] - fat["addr"])
        by_wrapper[i] = {arch_of(e): d for e, d in entries if arch_of(e) and d}
    in_order = {}
    at = 0
    while at < len(buf):
        if buf[at:at + 24] == BUNDLE_MAGIC or buf[at:at + 4] == CCOB_MAGIC:
            entries, end = bundle_at(buf, at)
            for e, d in entries:
                if arch_of(e) and d:
                    in_order.setdefault(arch_of(e), []).append(d)
            at = end
        else:
            at += 1
    return by_wrapper, in_order


# --- kpack ------------------------------------------------------------------


def kpack(data):
    """(toc dict, {(binary key, arch): bytes})"""
    if data[:4] != b"KPAK":
        raise ValueError("not a kpack archive")
    toc_off, = struct.unpack_from("<Q", data, 8)
    toc = msgpack.unpackb(data[toc_off:], raw=False, strict_map_key=False)
    blobs = []
    if toc["compression_scheme"] == "zstd-per-kernel":
        p = toc["zstd_offset"]
        n, = struct.unpack_from("<I", data, p)
        p += 4
        d = zstandard.ZstdDecompressor()
        for _ in range(n):
            ln, = struct.unpack_from("<I", data, p)
            blobs.append(d.decompress(data[p + 4:p + 4 + ln]))
            p += 4 + ln
    else:
        for b in toc["blobs"]:
            blobs.append(data[b["offset"]:b["offset"] + b["size"]])
    kernels = {}
    for key, arches in toc["toc"].items():
        for arch, e in arches.items():
            k = blobs[e["ordinal"]]
            if len(k) != e["original_size"]:
                raise ValueError("%s %s: %d bytes, original_size %d" % (key, arch, len(k), e["original_size"]))
            kernels[(key, arch)] = k
    return toc, kernels


# --- wheels -----------------------------------------------------------------


def members(path):
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i.filename) for i in z.infolist() if not i.is_dir()}


def meta_lines(files):
    meta = next(v for k, v in files.items() if k.endswith(".dist-info/METADATA")).decode()
    return {l for l in meta.splitlines() if l.startswith(("Provides-Extra:", "Requires-Dist:"))}


def record_style(files):
    rec = next(v for k, v in files.items() if k.endswith(".dist-info/RECORD")).decode()
    for line in rec.splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[1].startswith("sha256="):
            digest = parts[1][7:]
            return "hex" if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else "urlsafe-b64"
    return "none"


def main():
    fat_path, qdir, rdir = sys.argv[1:4]
    import os

    qnames = sorted(n for n in os.listdir(qdir) if n.endswith(".whl"))
    alone = rdir == "-"
    rnames = [] if alone else sorted(n for n in os.listdir(rdir) if n.endswith(".whl"))
    if alone:
        print("wheels: %d from quarry (no reference output to compare)" % len(qnames))
    elif qnames == rnames:
        print("wheels: the same %d names" % len(qnames))
    else:
        differs("wheel names: quarry %s, reference %s" % (qnames, rnames))
    fat = members(fat_path)
    q = {n: members(os.path.join(qdir, n)) for n in qnames}
    r = {n: members(os.path.join(rdir, n)) for n in rnames}

    for n in sorted(set(qnames) & set(rnames)):
        a, b = meta_lines(q[n]), meta_lines(r[n])
        if a == b:
            print("%s: METADATA requirements and extras equal (%d lines)" % (n, len(a)))
        else:
            only_q, only_r = sorted(a - b), sorted(b - a)
            if only_q == [] and only_r == ["Requires-Dist: rocm-bootstrap"]:
                by_design("%s: the reference adds `Requires-Dist: rocm-bootstrap` (unpinned; quarry's host "
                          "wheel needs nothing at run time to find its archives)" % n)
            else:
                differs("%s METADATA: only quarry %s; only reference %s" % (n, only_q, only_r))
        qs, rs = record_style(q[n]), record_style(r[n])
        if qs != rs:
            by_design("%s RECORD: quarry %s, reference %s (PEP 376/427 ask for urlsafe base64 without padding)"
                      % (n, qs, rs))

    # Fat binaries of the input and what they held.
    originals = {}
    for name, data in fat.items():
        if data[:4] != b"\x7fELF":
            continue
        try:
            elf = Elf(data)
        except Exception:
            continue
        if ".hip_fatbin" in elf.sections and ".hipFatBinSegment" in elf.sections:
            originals[name] = original_code(elf)

    # The archives.
    def archives(side):
        out = {}
        for n, files in side.items():
            for m, data in files.items():
                if m.endswith(".kpack"):
                    out[m] = kpack(data)
        return out

    qk, rk = archives(q), archives(r)
    if alone:
        checked = bad = 0
        for m in sorted(qk):
            for (key, arch), code in qk[m][1].items():
                checked += 1
                path, idx = key.rsplit("#", 1)
                pkg_path = next((o for o in originals if o.split("/", 1)[1] == path), None)
                want = pkg_path and originals[pkg_path][0].get(int(idx), {}).get(arch)
                if want != code:
                    bad += 1
                    differs("%s %s %s (quarry): not wrapper %s's code object" % (m, key, arch, idx))
        # Every code object of the input is in some archive.
        have = {(key, arch) for m in qk for (key, arch) in qk[m][1]}
        for o, (by_wrapper, _) in originals.items():
            for i, codes in by_wrapper.items():
                for arch in codes:
                    if ("%s#%d" % (o.split("/", 1)[1], i), arch) not in have:
                        bad += 1
                        differs("%s wrapper %d %s: in no archive" % (o, i, arch))
        print("kernels: %d decoded from quarry's %d archives, %d not the input's code object or missing"
              % (checked, len(qk), bad))
        return 1 if problems else 0
    if sorted(qk) != sorted(rk):
        differs("archives: quarry %s, reference %s" % (sorted(qk), sorted(rk)))
    top = fat_path and next(iter({m.split("/")[0] for m in originals}), "")
    bad_kernels = 0
    checked = 0
    for m in sorted(set(qk) & set(rk)):
        (qt, qker), (rt, rker) = qk[m], rk[m]
        for field in ("format_version", "group_name", "gfx_arch_family", "gfx_arches", "compression_scheme"):
            if qt.get(field) != rt.get(field):
                differs("%s %s: quarry %r, reference %r" % (m, field, qt.get(field), rt.get(field)))
        qflat = {(k, a): (e["ordinal"], e["original_size"], e["type"]) for k, v in qt["toc"].items() for a, e in v.items()}
        rflat = {(k, a): (e["ordinal"], e["original_size"], e["type"]) for k, v in rt["toc"].items() for a, e in v.items()}
        if qflat == rflat:
            print("%s: tables of contents equal (%d kernels)" % (m, len(qflat)))
        else:
            extra_q = sorted(set(qflat) - set(rflat))
            extra_r = sorted(set(rflat) - set(qflat))
            # -fgpu-rdc: two wrappers register one bundle; quarry keys both
            # (#0 and #1, one ordinal), the reference only the bundle (#0).
            rdc = []
            for key, arch in extra_q:
                same = [k for k in qflat if k[1] == arch and k[0].split("#")[0] == key.split("#")[0]
                        and k != (key, arch) and qflat[k][0] == qflat[(key, arch)][0]]
                if same:
                    rdc.append(key)
            if rdc:
                by_design("%s: quarry also has %s, sharing the ordinal of #0 of %s (-fgpu-rdc: every wrapper "
                          "registers the one bundle and the runtime asks for `name#i` for wrapper i; the "
                          "reference keys only #0, so wrapper 1 finds no kernel)" % (
                              m, sorted(set(rdc)), ", ".join(sorted({k.split("#")[0] for k in rdc}))))
            unexplained = [k for k in extra_q if k[0] not in rdc]
            if unexplained or extra_r:
                differs("%s TOC: only quarry %s; only reference %s" % (m, unexplained[:8], extra_r[:8]))
            common = set(qflat) & set(rflat)
            sizes = [k for k in common if qflat[k][1:] != rflat[k][1:]]
            if sizes:
                differs("%s TOC sizes/types: %s" % (m, [(k, qflat[k], rflat[k]) for k in sorted(sizes)[:8]]))
            renumbered = [k for k in common if qflat[k][0] != rflat[k][0]]
            if renumbered:
                by_design("%s: %d of %d common keys have other ordinals (quarry numbers by binary path, then "
                          "wrapper; the reference takes the largest binary first, ties in directory order); "
                          "every ordinal decodes to the same kernel (checked below)" % (m, len(renumbered), len(common)))
            elif not sizes:
                print("%s: tables of contents equal on the %d common keys" % (m, len(common)))
        # Every kernel: equal between the two, and the original code object.
        for (key, arch), code in qker.items():
            checked += 1
            if (key, arch) in rker and rker[(key, arch)] != code:
                bad_kernels += 1
                differs("%s %s %s: decoded kernels differ" % (m, key, arch))
            path, idx = key.rsplit("#", 1)
            pkg_path = None
            for o in originals:
                if o.split("/", 1)[1] == path:
                    pkg_path = o
            if pkg_path is None:
                differs("%s: %s names no fat binary of the input" % (m, key))
                continue
            by_wrapper, _ = originals[pkg_path]
            want = by_wrapper.get(int(idx), {}).get(arch)
            if want != code:
                bad_kernels += 1
                differs("%s %s %s (quarry): not wrapper %s's code object" % (m, key, arch, idx))
        for (key, arch), code in rker.items():
            path, idx = key.rsplit("#", 1)
            pkg_path = next((o for o in originals if o.split("/", 1)[1] == path), None)
            if pkg_path is None:
                continue
            _, in_order = originals[pkg_path]
            want = in_order.get(arch, [])
            if int(idx) >= len(want) or want[int(idx)] != code:
                bad_kernels += 1
                differs("%s %s %s (reference): not the %sth %s code object of the binary" % (m, key, arch, idx, arch))
    print("kernels: %d decoded from quarry's archives, %d not identical to the reference or the original"
          % (checked, bad_kernels))

    # Host binaries, field by field.
    host = next((n for n in qnames if n in r and any(k in r[n] for k in originals)), None)
    if host:
        for name in sorted(originals):
            qe, re_ = Elf(q[host][name]), Elf(r[host][name])
            fields = []
            for side, e in (("quarry", qe), ("reference", re_)):
                marker = e.body(".rocm_kpack_ref")
                ws = wrappers(e)
                fields.append(dict(
                    marker=marker,
                    decoded=msgpack.unpackb(marker, raw=False),
                    marker_flags=e.sections[".rocm_kpack_ref"]["flags"],
                    fatbin_type=e.sections[".hip_fatbin"]["type"],
                    wrappers=[(w["magic"], w["version"], w["index"], w["ptr"] == e.sections[".rocm_kpack_ref"]["addr"])
                              for w in ws],
                    size=len(e.data),
                ))
                if e.sections[".hip_fatbin"]["type"] != 8:
                    differs("%s (%s): .hip_fatbin is not NOBITS" % (name, side))
                for i, w in enumerate(ws):
                    if w["magic"] != b"HIPK" or w["index"] != i or w["ptr"] != e.sections[".rocm_kpack_ref"]["addr"]:
                        differs("%s (%s) wrapper %d: magic %r index %d pointer 0x%x (%s), marker at 0x%x" % (
                            name, side, i, w["magic"], w["index"], w["ptr"], w["how"],
                            e.sections[".rocm_kpack_ref"]["addr"]))
            fq, fr = fields
            same = [k for k in ("marker", "fatbin_type", "wrappers") if fq[k] == fr[k]]
            print("%s: %s equal; size quarry %d, reference %d, input %d" % (
                name, ", ".join(same) or "nothing", fq["size"], fr["size"], len(fat[name])))
            if fq["decoded"] != fr["decoded"]:
                differs("%s marker: quarry %r, reference %r" % (name, fq["decoded"], fr["decoded"]))
            elif fq["marker"] != fr["marker"]:
                by_design("%s marker: same map, other bytes (key order)" % name)
            if fq["wrappers"] != fr["wrappers"]:
                differs("%s wrappers: quarry %r, reference %r" % (name, fq["wrappers"], fr["wrappers"]))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
