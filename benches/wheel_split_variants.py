#!/usr/bin/env python3
"""Compare quarry's `wheel split --variants --device-requires-dist ...` with
ROCm's splitter (`--generate-variant-wheel --device-requires-dist ...
--databases ...`) on one fat wheel holding every kernel-database layout:
benches/wheel_split.sh's `databases` input.

usage: wheel_split_variants.py QUARRY_DIR REFERENCE_DIR

Checked, each line saying equal, by design (why) or DIFFERS:
- the classic wheels: the same names; per wheel the same members (so every
  database file is routed to the same device wheel) and the same
  Provides-Extra / Requires-Dist lines, but for the extras quarry gives the
  targets a family wheel serves (ROCm makes extras for the target wheels it
  made only);
- the variant metadata: the reference's one `-variant.whl` holds a
  `variant.json` listing every target; quarry's `NAME-VERSION-variants.json`
  must be that file byte for byte, and each quarry variant wheel's
  `variant.json` its one variant; the markers: each quarry variant wheel's
  METADATA requirement lines equal the reference variant wheel's, but for
  the family-served extras above;
- RECORDs: every line's hash checked against the member, and the encoding
  (PEP 376/427: urlsafe base64 without padding).
Exit status 1 when something DIFFERS.
"""

import base64
import hashlib
import json
import os
import sys
import zipfile

failed = False


def differs(msg):
    global failed
    failed = True
    print("DIFFERS: " + msg)


def members(path):
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i.filename) for i in z.infolist() if not i.is_dir()}


def dist_info_file(files, name):
    return next(v for k, v in files.items() if k.endswith(".dist-info/" + name))


def req_lines(files):
    meta = dist_info_file(files, "METADATA").decode()
    head = meta.split("\n\n", 1)[0]
    return [l for l in head.splitlines() if l.startswith(("Provides-Extra:", "Requires-Dist:"))]


def record_check(files):
    """(bad lines, encoding) of a wheel's RECORD."""
    rec = dist_info_file(files, "RECORD").decode()
    bad, enc = [], "none"
    for line in rec.splitlines():
        name, digest, size = line.rsplit(",", 2)
        if not digest:
            continue
        algo, value = digest.split("=", 1)
        data = files.get(name)
        raw = hashlib.sha256(data).digest() if data is not None else None
        if value == base64.urlsafe_b64encode(raw or b"").rstrip(b"=").decode():
            enc = "urlsafe-b64"
        elif raw is not None and value == raw.hex():
            enc = "hex"
            bad.append(name)
        else:
            bad.append(name)
    return bad, enc


def family_extras(lines, ours, theirs):
    """The extras in `lines` only one side has, with their requirements."""
    out = []
    extra = None
    for l in lines:
        if l.startswith("Provides-Extra:"):
            extra = l.split(":", 1)[1].strip()
        if extra and extra not in theirs and extra in ours:
            out.append(l)
    return out


def extras_of(lines):
    return {l.split(":", 1)[1].strip() for l in lines if l.startswith("Provides-Extra:")}


def main():
    qdir, rdir = sys.argv[1:3]
    listing = lambda d: sorted(n for n in os.listdir(d) if n.endswith(".whl"))
    qall, rall = listing(qdir), listing(rdir)
    is_q_variant = lambda n: len(n[:-4].split("-")) == 6
    qvariants = [n for n in qall if is_q_variant(n)]
    rvariant = [n for n in rall if n.endswith("-variant.whl")]
    qclassic = [n for n in qall if n not in qvariants]
    rclassic = [n for n in rall if n not in rvariant]
    if qclassic == rclassic:
        print("classic wheels: the same %d names" % len(qclassic))
    else:
        differs("classic wheel names: quarry %s, reference %s" % (qclassic, rclassic))
    q = {n: members(os.path.join(qdir, n)) for n in qall}
    r = {n: members(os.path.join(rdir, n)) for n in rall}

    host = next(n for n in qclassic if "_device_" not in n)
    q_extras, r_extras = extras_of(req_lines(q[host])), extras_of(req_lines(r[host])) if host in r else set()
    only_q = q_extras - r_extras
    if only_q:
        print("by design: quarry's host has %d more device extras (%s): targets a family wheel serves"
              % (len(only_q), ", ".join(sorted(only_q))))
    if r_extras - q_extras:
        differs("extras only the reference has: %s" % sorted(r_extras - q_extras))

    for n in sorted(set(qclassic) & set(rclassic)):
        a = {k for k in q[n] if ".dist-info/" not in k}
        b = {k for k in r[n] if ".dist-info/" not in k}
        if a == b:
            print("%s: the same %d members" % (n, len(a)))
        else:
            differs("%s members: only quarry %s; only reference %s" % (n, sorted(a - b), sorted(b - a)))
        ql = [l for l in req_lines(q[n]) if l not in family_extras(req_lines(q[n]), q_extras, r_extras)]
        rl = req_lines(r[n])
        # A device wheel's requirement on its sub-family or family wheel: quarry's, so that
        # the device wheel alone pulls what it needs (the reference relies on the host's extra).
        prefix = "Requires-Dist: " + n.split("_device_")[0] + "-device-"
        parents = [l for l in set(ql) - set(rl) if "_device_" in n and l.startswith(prefix)]
        if parents:
            print("by design: %s also requires %s (its family wheel; the reference's device wheels do not)"
                  % (n, ", ".join(l.split(":", 1)[1].strip() for l in parents)))
            ql = [l for l in ql if l not in parents]
        if set(ql) == set(rl):
            print("%s: requirements and extras equal (%d lines)" % (n, len(rl)))
        else:
            differs("%s METADATA: only quarry %s; only reference %s"
                    % (n, sorted(set(ql) - set(rl)), sorted(set(rl) - set(ql))))

    # Variant metadata.
    index = [f for f in os.listdir(qdir) if f.endswith("-variants.json")]
    if len(rvariant) != 1 or len(index) != 1:
        differs("variant outputs: quarry %s + %s, reference %s" % (qvariants, index, rvariant))
    else:
        ref_json = dist_info_file(r[rvariant[0]], "variant.json")
        ours = open(os.path.join(qdir, index[0]), "rb").read()
        ref_doc, our_doc = json.loads(ref_json), json.loads(ours)
        fam = sorted(set(our_doc["variants"]) - set(ref_doc["variants"]))
        if ours == ref_json:
            print("%s: byte for byte the reference's variant.json" % index[0])
        elif fam and {k: v for k, v in our_doc["variants"].items() if k not in fam} == ref_doc["variants"]:
            print("by design: %s lists the family-served targets %s too; otherwise the reference's" % (index[0], fam))
        else:
            differs("%s against the reference's variant.json:\n%s\n%s" % (index[0], ours.decode(), ref_json.decode()))
        print("by design: the reference's one variant wheel lists %d variants in its variant.json (variantlib "
              "and PEP 817: one per wheel); quarry writes %d variant wheels" % (len(ref_doc["variants"]), len(qvariants)))
        for n in qvariants:
            label = n[:-4].split("-")[5]
            one = json.loads(dist_info_file(q[n], "variant.json"))
            if list(one["variants"]) != [label] or one["variants"][label] != our_doc["variants"][label]:
                differs("%s: variant.json does not hold its own variant only: %s" % (n, one["variants"]))
        rl = req_lines(r[rvariant[0]])
        for n in qvariants:
            ql = req_lines(q[n])
            fam_lines = family_extras(ql, q_extras, r_extras)
            fam_lines += [l for l in ql if any(('"amd :: gfx_arch :: %s"' % e[len("device-"):]) in l for e in only_q)]
            ql = [l for l in ql if l not in fam_lines]
            if set(ql) == set(rl) and len(ql) == len(rl):
                order = "" if ql == rl else "; targets in rocm-bootstrap's order, the reference's sorted by name"
                print("%s: METADATA requirements and variant markers equal the reference variant wheel's (%d lines%s)"
                      % (n, len(rl), order))
            else:
                differs("%s markers: only quarry %s; only reference %s" % (n, sorted(set(ql) - set(rl)), sorted(set(rl) - set(ql))))

    # RECORDs.
    for side, wheels in (("quarry", q), ("reference", r)):
        wrong = {}
        encs = set()
        for n, files in wheels.items():
            bad, enc = record_check(files)
            encs.add(enc)
            if bad:
                wrong[n] = len(bad)
        if side == "quarry" and wrong:
            differs("quarry RECORD lines that do not match: %s" % wrong)
        else:
            print("%s RECORDs: %s; %s" % (side, "/".join(sorted(encs)),
                                         "every line matches" if not wrong else
                                         "%d wheels with lines that are not PEP 376 hashes (hex digests)" % len(wrong)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
