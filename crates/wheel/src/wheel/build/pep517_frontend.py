"""quarry's PEP 517 frontend, run inside the build container (Python 3.6+).

    frontend.py unpack SDIST DEST
        extract an sdist into DEST; print the project directory
    frontend.py requires BACKEND BACKEND_PATH_JSON RESULT
        write get_requires_for_build_wheel({}) as a JSON list to RESULT
    frontend.py build BACKEND BACKEND_PATH_JSON OUTDIR RESULT
        build_wheel(OUTDIR, {}); write the wheel's file name to RESULT

The hooks run in this process, from the project directory (the current
directory), with the isolated environment's Python. Results go to a file:
the backend's own output may go anywhere.
"""
import importlib
import json
import os
import sys



def write(path, text):
    with open(path, "w") as f:
        f.write(text + "\n")


def fixed_temp_names():
    """Temporary names from a fixed seed: a backend that builds in a
    tempfile.mkdtemp() directory (frozenlist's in-tree backend,
    meson-python, scikit-build-core) then records the same path (in debug
    information, generated files) in every build. Each build runs in a
    fresh container, so the same names never collide."""
    try:
        import random
        import tempfile

        names = tempfile._RandomNameSequence()
        names._rng = random.Random(0x9A77)
        names._rng_pid = os.getpid()
        tempfile._name_sequence = names
    except Exception:
        pass


def backend(name, paths_json):
    paths = [os.path.abspath(p) for p in json.loads(paths_json)]
    sys.path[:0] = paths
    module, _, attrs = name.partition(":")
    obj = importlib.import_module(module.strip())
    for attr in attrs.strip().split(".") if attrs.strip() else []:
        obj = getattr(obj, attr)
    return obj


def unpack(sdist, dest):
    os.makedirs(dest)
    if sdist.endswith(".zip"):
        import zipfile

        with zipfile.ZipFile(sdist) as z:
            z.extractall(dest)
    else:
        import tarfile

        with tarfile.open(sdist) as t:
            if hasattr(tarfile, "data_filter"):
                t.extractall(dest, filter="data")
            else:
                for m in t.getmembers():
                    if m.name.startswith("/") or ".." in m.name.split("/"):
                        sys.exit("quarry: %s: unsafe member %r" % (sdist, m.name))
                t.extractall(dest)
    entries = os.listdir(dest)
    top = dest
    if len(entries) == 1 and os.path.isdir(os.path.join(dest, entries[0])):
        top = os.path.join(dest, entries[0])
    print(top)


def main(argv):
    cmd = argv[1]
    if cmd == "unpack":
        unpack(argv[2], argv[3])
    elif cmd == "requires":
        hook = getattr(backend(argv[2], argv[3]), "get_requires_for_build_wheel", None)
        write(argv[4], json.dumps([str(r) for r in (hook({}) if hook else [])]))
    elif cmd == "build":
        os.makedirs(argv[4], exist_ok=True)
        fixed_temp_names()
        write(argv[5], backend(argv[2], argv[3]).build_wheel(argv[4], {}))
    else:
        sys.exit("quarry: unknown frontend command %r" % cmd)


if __name__ == "__main__":
    main(sys.argv)
