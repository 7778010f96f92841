"""The `rocm-sdk` command."""

import argparse
import os
import sys


def _devel_root():
    import rocm_sdk
    from . import _devel

    try:
        return _devel.expand()
    except _devel.DevelError as e:
        raise SystemExit("rocm-sdk: %s" % e)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="rocm-sdk", description="The ROCm SDK installed by the rocm packages.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("path", help="print a path of the SDK (expands the devel package on first use)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--root", action="store_true", help="the SDK root")
    which.add_argument("--bin", action="store_true", help="the directory of the SDK's tools")
    which.add_argument("--cmake", action="store_true", help="the CMake package directory (CMAKE_PREFIX_PATH)")
    sub.add_parser("version", help="print the SDK version")
    sub.add_parser("targets", help="print the GPU targets of the installed packages")
    init = sub.add_parser("init", help="expand the devel package now")
    init.add_argument("--quiet", action="store_true", help="print nothing")
    sub.add_parser("test", help="run the self tests")
    args = parser.parse_args(argv)

    import rocm_sdk
    from . import _dist_info

    if args.command == "version":
        print(rocm_sdk.__version__)
    elif args.command == "targets":
        print(";".join(_dist_info.TARGETS))
    elif args.command == "path":
        root = _devel_root()
        if args.root:
            print(root)
        elif args.bin:
            print(os.path.join(root, "bin"))
        else:
            print(os.path.join(root, "lib", "cmake"))
    elif args.command == "init":
        root = _devel_root()
        if not args.quiet:
            print(root)
    elif args.command == "test":
        from . import _selftest

        return _selftest.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
