//! `/etc/ld.so.cache`, as `ldconfig` (run by libc-bin's postinst) would
//! write it, generated from the tree without running anything from the
//! image: the directories of `/etc/ld.so.conf` (with its `include`s) and the
//! multiarch system directories, each shared object's SONAME read with
//! `object`, in glibc's "new" cache format (`glibc-ld.so.cache1.1`).
//! Hand-written because no crate writes this format; the layout follows
//! glibc's `sysdeps/generic/dl-cache.h` and the selection of libraries its
//! `elf/ldconfig.c`. The loader binary-searches the entries, so they are
//! sorted exactly as ldconfig sorts them (`_dl_cache_libcmp`, descending).

use super::usrmerge::merged_usr_path;
use crate::layer::path::{display, normalize_dest, parent};
use crate::layer::{Content, Kind, Tree};
use object::read::elf::{Dyn, FileHeader};
use object::{Endianness, ReadCache, ReadRef};
use std::cmp::Ordering;
use std::collections::BTreeSet;

/// What an architecture's libraries look like and are flagged as.
struct Abi {
    triplet: &'static str,
    class64: bool,
    machine: object::elf::Machine,
    /// FLAG_ELF_LIBC6 plus the architecture's flag.
    flags: i32,
}

fn abi(arch: &str) -> Option<Abi> {
    let (triplet, class64, machine, flags) = match arch {
        "amd64" => ("x86_64-linux-gnu", true, object::elf::EM_X86_64, 0x0303),
        "arm64" => ("aarch64-linux-gnu", true, object::elf::EM_AARCH64, 0x0a03),
        "ppc64el" => ("powerpc64le-linux-gnu", true, object::elf::EM_PPC64, 0x0503),
        "s390x" => ("s390x-linux-gnu", true, object::elf::EM_S390, 0x0403),
        "i386" => ("i386-linux-gnu", false, object::elf::EM_386, 0x0003),
        _ => return None,
    };
    Some(Abi { triplet, class64, machine, flags })
}

/// glibc's `_dl_cache_libcmp`: digit runs compare numerically.
pub fn libcmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    while i < a.len() {
        let (ca, cb) = (a[i], b.get(j).copied().unwrap_or(0));
        if ca.is_ascii_digit() {
            if !cb.is_ascii_digit() {
                return Ordering::Greater;
            }
            let (mut va, mut vb) = (0u64, 0u64);
            while i < a.len() && a[i].is_ascii_digit() {
                va = va.saturating_mul(10).saturating_add((a[i] - b'0') as u64);
                i += 1;
            }
            while j < b.len() && b[j].is_ascii_digit() {
                vb = vb.saturating_mul(10).saturating_add((b[j] - b'0') as u64);
                j += 1;
            }
            if va != vb {
                return va.cmp(&vb);
            }
        } else if cb.is_ascii_digit() {
            return Ordering::Less;
        } else if ca != cb {
            return ca.cmp(&cb);
        } else {
            i += 1;
            j += 1;
        }
    }
    0u8.cmp(&b.get(j).copied().unwrap_or(0))
}

/// Follow symlinks (absolute or relative, any component) to a tree path.
fn resolve(tree: &Tree, path: &[u8]) -> Option<Vec<u8>> {
    tree.follow_symlinks(path, true)
}

pub(crate) fn is_dso(name: &[u8]) -> bool {
    let has_so = name.windows(3).any(|w| w == b".so");
    ((name.starts_with(b"lib") || name.starts_with(b"ld-")) && has_so)
        || name.starts_with(b"ld.so.")
        || name.starts_with(b"ld64.so.")
}

/// The SONAME of a shared object of this ABI (`Some(None)`: no SONAME),
/// or None when the file is not one (linker scripts, other classes).
fn soname(node: &crate::layer::Node, abi: &Abi) -> Option<Option<Vec<u8>>> {
    let Kind::File { size, content } = &node.kind else {
        return None;
    };
    if *size < 64 {
        return None;
    }
    let (file, offset) = match content {
        Content::Slice { file, offset } => (std::fs::File::open(file.as_ref()).ok()?, *offset),
        Content::Host(p) | Content::HostToHash(p) => (std::fs::File::open(p).ok()?, 0),
        Content::Bytes(b) => return soname_in(&b[..], abi),
    };
    let cache = ReadCache::new(file);
    soname_in(cache.range(offset, *size), abi)
}

fn soname_in<'d, R: ReadRef<'d>>(data: R, abi: &Abi) -> Option<Option<Vec<u8>>> {
    let ident = data.read_bytes_at(0, 16).ok()?;
    if &ident[..4] != b"\x7fELF" || (ident[4] == 2) != abi.class64 {
        return None;
    }
    if abi.class64 {
        soname_of::<object::elf::FileHeader64<Endianness>, R>(data, abi)
    } else {
        soname_of::<object::elf::FileHeader32<Endianness>, R>(data, abi)
    }
}

fn soname_of<'d, H: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(data: R, abi: &Abi) -> Option<Option<Vec<u8>>> {
    let h = H::parse(data).ok()?;
    let e = h.endian().ok()?;
    if h.e_machine(e) != abi.machine {
        return None;
    }
    let sections = h.sections(e, data).ok()?;
    let Some((dyns, link)) = sections.dynamic(e, data).ok()? else {
        return Some(None);
    };
    let strings = sections.strings(e, data, link).ok()?;
    for d in dyns {
        if d.tag(e) == object::elf::DT_SONAME {
            return Some(d.string(e, strings).ok().map(|s| s.to_vec()));
        }
    }
    Some(None)
}

/// Directories to scan, in ldconfig's order: ld.so.conf (and its includes),
/// then the system directories.
fn conf_dirs(tree: &Tree, conf: &[u8], depth: usize, out: &mut Vec<String>) {
    let Some(node) = tree.get(conf) else { return };
    let Ok(text) = node.read_content() else {
        return;
    };
    for line in String::from_utf8_lossy(&text).lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include").filter(|r| r.starts_with(char::is_whitespace)) {
            if depth > 8 {
                continue;
            }
            let pattern = pattern.trim();
            let Ok(glob) = globset::Glob::new(pattern).map(|g| g.compile_matcher()) else {
                continue;
            };
            let Ok(dir) = normalize_dest(pattern.rsplit_once('/').map(|(d, _)| d).unwrap_or("/etc")) else {
                continue;
            };
            let Some(real) = resolve(tree, &dir) else {
                continue;
            };
            let mut files: Vec<Vec<u8>> = tree
                .iter()
                .filter(|(p, _)| parent(p) == Some(&real[..]))
                .filter(|(p, _)| {
                    let name = display(&p[real.len() + usize::from(!real.is_empty())..]);
                    glob.is_match(format!("/{}/{name}", display(&dir)))
                })
                .map(|(p, _)| p.clone())
                .collect();
            files.sort();
            for f in files {
                conf_dirs(tree, &f, depth + 1, out);
            }
        } else if line.starts_with('/') {
            out.push(line.split_whitespace().next().unwrap_or(line).trim_end_matches('/').to_string());
        }
    }
}

struct Entry {
    key: Vec<u8>,
    value: Vec<u8>,
}

/// The cache for `tree`, or None when the architecture is not one this
/// writer knows or the tree has no ld.so.conf.
pub fn generate(tree: &Tree, arch: &str) -> Option<Vec<u8>> {
    let abi = abi(arch)?;
    tree.get(b"etc/ld.so.conf")?;
    let mut dirs = Vec::new();
    conf_dirs(tree, b"etc/ld.so.conf", 0, &mut dirs);
    dirs.push(format!("/lib/{}", abi.triplet));
    dirs.push(format!("/usr/lib/{}", abi.triplet));
    let mut seen_dirs = BTreeSet::new();
    let mut entries: Vec<Entry> = Vec::new();
    for dir in dirs {
        let Ok(d) = normalize_dest(&dir) else {
            continue;
        };
        let Some(real) = resolve(tree, &merged_usr_path(&d)).or_else(|| resolve(tree, &d)) else {
            continue;
        };
        if !matches!(tree.get(&real).map(|n| &n.kind), Some(Kind::Dir)) || !seen_dirs.insert(real.clone()) {
            continue;
        }
        // soname -> whether it came from a link to the soname file (ld(1)'s .so link)
        let mut libs: Vec<(Vec<u8>, bool)> = Vec::new();
        let children: Vec<Vec<u8>> =
            tree.iter().filter(|(p, _)| parent(p) == Some(&real[..])).map(|(p, _)| p.clone()).collect();
        for child in children {
            let name =
                child[child.len() - child.rsplit(|&b| b == b'/').next().map(<[u8]>::len).unwrap_or(0)..].to_vec();
            if !is_dso(&name) {
                continue;
            }
            let node = tree.get(&child).expect("listed");
            let (real_file, is_link) = match &node.kind {
                Kind::File { .. } => (child.clone(), false),
                Kind::Symlink(_) => match resolve(tree, &child) {
                    Some(r) => (r, true),
                    None => continue,
                },
                Kind::Hardlink(t) => (t.clone(), false),
                _ => continue,
            };
            let Some(real_node) = tree.get(&real_file) else {
                continue;
            };
            let Some(so) = soname(real_node, &abi) else {
                continue;
            };
            let so = so.unwrap_or_else(|| name.clone());
            // ldconfig: a link keeps its own name when it is the soname or
            // ld(1)'s `.so` link (a prefix of the soname ending in `.so`).
            let keeps_name = is_link && (name == so || (name.ends_with(b".so") && so.starts_with(&name)));
            let key = if keeps_name { name.clone() } else { so };
            match libs.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 &= keeps_name,
                None => libs.push((key, keeps_name)),
            }
        }
        for (key, _) in libs {
            let mut value = dir.clone().into_bytes();
            value.push(b'/');
            value.extend_from_slice(&key);
            entries.push(Entry { key, value });
        }
    }
    // Descending, as ldconfig's compare() sorts (same flags for all entries).
    entries.sort_by(|a, b| libcmp(&b.key, &a.key));
    Some(write_cache(&entries, abi.flags))
}

fn write_cache(entries: &[Entry], flags: i32) -> Vec<u8> {
    const HEADER: usize = 48;
    const ENTRY: usize = 24;
    let strings_at = HEADER + entries.len() * ENTRY;
    let mut strings: Vec<u8> = Vec::new();
    let mut table = Vec::with_capacity(entries.len());
    for e in entries {
        // The key is the value's last component: it shares the value's bytes.
        let value_off = strings_at + strings.len();
        strings.extend_from_slice(&e.value);
        strings.push(0);
        let key_off = value_off + e.value.len() - e.key.len();
        table.push((key_off as u32, value_off as u32));
    }
    let mut out = Vec::with_capacity(strings_at + strings.len());
    out.extend_from_slice(b"glibc-ld.so.cache1.1");
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
    // flags: little-endian (2); three padding bytes; no extension section.
    out.extend_from_slice(&[2, 0, 0, 0]);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&[0u8; 12]);
    for (k, v) in table {
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&v.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
    }
    out.extend_from_slice(&strings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libcmp_like_glibc() {
        assert_eq!(libcmp(b"libz.so.10", b"libz.so.9"), Ordering::Greater);
        assert_eq!(libcmp(b"libc.so.6", b"libc.so.6"), Ordering::Equal);
        assert_eq!(libcmp(b"lib2", b"liba"), Ordering::Greater);
        assert_eq!(libcmp(b"libfoo", b"libfoo.so"), Ordering::Less);
    }

    #[test]
    fn resolves_links_in_the_tree() {
        use crate::layer::Node;
        let mut t = Tree::new();
        t.insert(b"usr/lib/x86_64-linux-gnu".to_vec(), Node::dir(0o755)).unwrap();
        t.insert(b"lib".to_vec(), Node::new(Kind::Symlink(b"usr/lib".to_vec()), 0o777)).unwrap();
        t.insert(
            b"usr/lib/x86_64-linux-gnu/a".to_vec(),
            Node::new(Kind::Symlink(b"../../../lib/x86_64-linux-gnu".to_vec()), 0o777),
        )
        .unwrap();
        assert_eq!(resolve(&t, b"lib/x86_64-linux-gnu").unwrap(), b"usr/lib/x86_64-linux-gnu");
        assert_eq!(resolve(&t, b"usr/lib/x86_64-linux-gnu/a").unwrap(), b"usr/lib/x86_64-linux-gnu");
        assert!(resolve(&t, b"nowhere").is_none());
    }
}
