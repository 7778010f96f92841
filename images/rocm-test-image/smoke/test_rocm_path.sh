# An example smoke test (replace the directory with yours: --set SMOKE_TESTS=DIR):
# ROCm is where ROCM_PATH says and its libraries are known to the loader.
set -e
test -n "$ROCM_PATH" || { echo "ROCM_PATH is not set"; exit 1; }
test -d "$ROCM_PATH" || { echo "ROCM_PATH=$ROCM_PATH is not a directory"; exit 1; }
echo "ROCM_PATH=$ROCM_PATH: $(ls "$ROCM_PATH" | tr '\n' ' ')"
python3 -c 'import sys; print("python", sys.version.split()[0], "in", sys.prefix)'
