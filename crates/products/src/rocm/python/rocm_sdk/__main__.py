"""The `rocm-sdk` command, with the reference's subcommands, flags, output
and exit codes: `path --cmake|--bin|--root`, `test`, `version`, `targets`,
`init [--quiet]`."""

import argparse
import json
import os
import sys


def _devel_root(what):
    from . import _devel

    try:
        return _devel.get_devel_root()
    except ModuleNotFoundError as e:
        if what == "path":
            print(
                "ERROR: Could not load the `rocm[devel]` package, which is required to access runtime tools "
                "and development files. Please install it with your package manager (pip, uv, etc)",
                file=sys.stderr,
            )
            print("ERROR: %s" % e, file=sys.stderr)
        else:
            print("ERROR running init: %s" % e, file=sys.stderr)
        sys.exit(1)


def _targets():
    """`dist_amdgpu_targets` of core's share/therock/dist_info.json (what
    the reference prints), else the targets this release was packaged for."""
    from . import _dist_info, _package_dir

    core = _package_dir("core")
    if core:
        try:
            with open(os.path.join(core, "share", "therock", "dist_info.json"), "rb") as f:
                return json.load(f)["dist_amdgpu_targets"]
        except (OSError, ValueError, KeyError):
            pass
    return ";".join(_dist_info.TARGETS)


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    p = argparse.ArgumentParser(prog="rocm-sdk", usage="rocm-sdk {command} ...", description="ROCm SDK Python CLI")
    sub = p.add_subparsers(dest="command", required=True)
    path = sub.add_parser("path", help="Print various paths to ROCm installation")
    which = path.add_mutually_exclusive_group(required=True)
    which.add_argument("--cmake", action="store_true", help="Print the CMAKE_PATH_PREFIX for the ROCm development package")
    which.add_argument("--bin", action="store_true", help="Print the ROCm development package binary directory")
    which.add_argument("--root", action="store_true", help="Print the ROCm development package root directory")
    sub.add_parser("test", help="Run installation tests to verify integrity")
    sub.add_parser("version", help="Print version information")
    sub.add_parser("targets", help="Print information about the GPU targets that are supported")
    init = sub.add_parser(
        "init",
        help="Expand devel contents to initialize rocm[devel] and link device files from installed "
        "rocm-sdk-device-* wheels into the devel tree (re-run after installing or removing a device wheel to refresh)",
    )
    init.add_argument("--quiet", action="store_true", help="Run without producing output")
    args = p.parse_args(argv)

    from . import _dist_info

    if args.command == "version":
        print(_dist_info.VERSION)
    elif args.command == "targets":
        print(_targets())
    elif args.command == "path":
        root = _devel_root("path")
        print(root / "lib" / "cmake" if args.cmake else root / "bin" if args.bin else root)
    elif args.command == "init":
        root = _devel_root("init")
        if not args.quiet:
            print("Devel contents expanded to '%s'" % root)
    elif args.command == "test":
        from . import _selftest

        if _selftest.run() != 0:
            sys.exit(1)


if __name__ == "__main__":
    main()
