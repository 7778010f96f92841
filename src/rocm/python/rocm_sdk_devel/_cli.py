"""rocm-sdk-devel: expand the devel tree (`python -m rocm_sdk_devel._cli`)."""

import sys


def main():
    from rocm_sdk import _devel

    print(_devel.expand())
    return 0


if __name__ == "__main__":
    sys.exit(main())
