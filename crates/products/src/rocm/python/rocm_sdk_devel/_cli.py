"""rocm-sdk-devel: expand the devel tree (`python -m rocm_sdk_devel._cli`).

Ships in the devel wheel, which must work under either `rocm` selector: it
runs the command both define, `python -m rocm_sdk init`, rather than any
`rocm_sdk` function."""

import subprocess
import sys


def main():
    return subprocess.call([sys.executable, "-m", "rocm_sdk", "init"])


if __name__ == "__main__":
    sys.exit(main())
