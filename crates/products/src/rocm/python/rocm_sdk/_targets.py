"""GPU detection from the KFD topology, without running anything."""

import os

_TOPOLOGY = ("/sys/class/kfd/kfd/topology/nodes", "/sys/devices/virtual/kfd/kfd/topology/nodes")


def gfx_name(version):
    """gfx_target_version (e.g. 90402) -> gfx942; 0 (CPU) -> None."""
    if not version:
        return None
    major, minor, stepping = version // 10000, (version // 100) % 100, version % 100
    return "gfx%d%d%x" % (major, minor, stepping)


def detected_targets(root=None):
    roots = [os.path.join(root, "class/kfd/kfd/topology/nodes")] if root else list(_TOPOLOGY)
    sysfs = os.environ.get("QUARRY_SYSFS_ROOT")
    if sysfs and root is None:
        roots = [os.path.join(sysfs, "class/kfd/kfd/topology/nodes")]
    found = []
    for nodes in roots:
        if not os.path.isdir(nodes):
            continue
        for node in sorted(os.listdir(nodes), key=lambda n: int(n) if n.isdigit() else 0):
            props = os.path.join(nodes, node, "properties")
            try:
                with open(props) as f:
                    for line in f:
                        key, _, value = line.partition(" ")
                        if key == "gfx_target_version":
                            name = gfx_name(int(value.strip() or 0))
                            if name and name not in found:
                                found.append(name)
            except OSError:
                continue
        if found:
            break
    return found


def family_candidates(target):
    """gfx942 -> [gfx94X-all, gfx94X-dgpu, gfx94X-igpu, gfx94X-dcgpu, gfx942]."""
    stem = target[:-1] + "X"
    return [stem + s for s in ("-all", "-dgpu", "-igpu", "-dcgpu")] + [target]


def detected_family(families):
    """The first family of `families` that a detected GPU belongs to."""
    for target in detected_targets():
        for candidate in family_candidates(target):
            if candidate in families:
                return candidate
    return None
