#!/usr/bin/env python3
"""Make a "compromised image" from an OCI layout, as an attacker who can
write the layout would: one byte of one file in the middle of its .text
section (an ELF file) changed, the layer re-packed, the config's diff_id
and the manifest's digests recomputed, and the provenance re-attached with
its subject moved to the new manifest, so the layout is internally
consistent and every digest checks. Independent of quarry (Python's
tarfile, gzip, hashlib, json).

usage: tamper_image.py LAYOUT FILE   (FILE as in the image: usr/bin/sudo)
prints JSON: {"section", "file_offset", "manifest"}

       tamper_image.py LAYOUT --subject-only
leaves the image and moves only the provenance statement's subject to
another digest (a provenance made for another image).
"""

import gzip
import hashlib
import io
import json
import os
import struct
import sys
import tarfile

IN_TOTO = "application/vnd.in-toto+json"


def blob_path(layout, digest):
    return os.path.join(layout, "blobs", "sha256", digest.split(":", 1)[1])


def read_blob(layout, digest):
    with open(blob_path(layout, digest), "rb") as f:
        return f.read()


def write_blob(layout, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if not os.path.exists(blob_path(layout, digest)):
        with open(blob_path(layout, digest), "wb") as f:
            f.write(data)
    return digest, len(data)


def text_section(elf):
    """(offset, size) of .text in an ELF64 little-endian file."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and elf[5] == 1, "ELF64 LE only"
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize)
    strtab_off = header(shstrndx)[4]
    for i in range(shnum):
        name, _type, _flags, _addr, off, size = header(i)[:6]
        end = elf.index(b"\0", strtab_off + name)
        if elf[strtab_off + name:end] == b".text":
            return off, size
    raise SystemExit(".text not found")


def reattach(layout, index, entry, mdigest, msize, subject):
    """Point the image entry at `mdigest` and the provenance's statement at
    `subject`, its artifact at the image; write index.json."""
    manifests = []
    for m in index["manifests"]:
        if m is entry:
            m = dict(m, digest=mdigest, size=msize)
        elif m.get("artifactType") == IN_TOTO:
            art = json.loads(read_blob(layout, m["digest"]))
            statement = json.loads(read_blob(layout, art["layers"][0]["digest"]))
            statement["subject"][0]["digest"]["sha256"] = subject.split(":", 1)[1]
            sdigest, ssize = write_blob(layout, (json.dumps(statement, indent=2) + "\n").encode())
            art["layers"][0]["digest"], art["layers"][0]["size"] = sdigest, ssize
            art["subject"] = {"mediaType": entry["mediaType"], "digest": mdigest, "size": msize}
            adigest, asize = write_blob(layout, json.dumps(art, separators=(",", ":")).encode())
            m = dict(m, digest=adigest, size=asize)
        manifests.append(m)
    index["manifests"] = manifests
    # A new file: the layout may share its files with another (cp -al).
    os.remove(os.path.join(layout, "index.json"))
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)


def main():
    layout, target = sys.argv[1], sys.argv[2].lstrip("/")
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    entry = next(m for m in index["manifests"] if "artifactType" not in m)
    if target == "--subject-only":
        reattach(layout, index, entry, entry["digest"], entry["size"], "sha256:" + "0" * 64)
        return
    manifest = json.loads(read_blob(layout, entry["digest"]))
    config = json.loads(read_blob(layout, manifest["config"]["digest"]))

    for i, layer in enumerate(manifest["layers"]):
        # (gzip.decompress copies the rest of the input for each member:
        # quadratic on quarry's many-member layers; GzipFile streams.)
        with gzip.open(blob_path(layout, layer["digest"])) as g:
            raw = g.read()
        with tarfile.open(fileobj=io.BytesIO(raw)) as t:
            member = next((m for m in t.getmembers() if m.name.lstrip("./") == target and m.isfile()), None)
        if member is None:
            continue
        data = raw[member.offset_data:member.offset_data + member.size]
        off, size = text_section(data)
        pos = off + size // 2
        tampered = bytearray(raw)
        tampered[member.offset_data + pos] ^= 0x01
        tampered = bytes(tampered)
        digest, size_ = write_blob(layout, gzip.compress(tampered, 1, mtime=0))
        manifest["layers"][i]["digest"], manifest["layers"][i]["size"] = digest, size_
        config["rootfs"]["diff_ids"][i] = "sha256:" + hashlib.sha256(tampered).hexdigest()
        break
    else:
        raise SystemExit(f"{target} is in no layer")

    cdigest, csize = write_blob(layout, json.dumps(config, separators=(",", ":")).encode())
    manifest["config"]["digest"], manifest["config"]["size"] = cdigest, csize
    mbytes = json.dumps(manifest, separators=(",", ":")).encode()
    mdigest, msize = write_blob(layout, mbytes)

    reattach(layout, index, entry, mdigest, msize, mdigest)
    print(json.dumps({"section": ".text", "file_offset": pos, "manifest": mdigest}))


if __name__ == "__main__":
    main()
