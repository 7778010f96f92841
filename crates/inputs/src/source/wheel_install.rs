//! Installing a wheel into a layer without Python, laid out as
//! `pip install --prefix DEST` would, with one difference for programs:
//!
//! - `NAME.data/scripts/*` -> `DEST/bin/` (made executable; a `#!python`
//!   line becomes `#!/usr/bin/env python3`);
//! - `NAME.data/data/*` -> `DEST/`; `NAME.data/headers/*` -> `DEST/include/NAME/`;
//! - the packages, `NAME.data/purelib|platlib/*` and the `.dist-info` ->
//!   the site-packages directory (`site_packages`, default
//!   `lib/python3/site-packages` below DEST: no Python version in the path,
//!   so put it on PYTHONPATH to import the package);
//! - console scripts (`entry_points.txt`) need Python, so instead each one
//!   whose name matches an executable file the wheel ships under a `bin/`
//!   directory (cmake's `cmake/data/bin/cmake`, clang-format's...) becomes a
//!   relative symlink `DEST/bin/NAME` to that file; the others are left out.
//!   `bin = { NAME = "path/in/wheel" }` adds or overrides links.

use crate::layer::archive::{ArchiveError, Placement};
use crate::layer::path::{display, join, normalize_dest, normalize_member, PathProblem};
use crate::layer::{Content, Kind, Node, Tree, TreeError};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Why a wheel could not be installed into a layer; the message for the
/// source's `pypi` field.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("`{wheel}` is not a wheel: it must hold exactly one `*.dist-info` directory")]
    NotAWheel { wheel: String },
    #[error("site_packages `{site_packages}` {problem}")]
    SitePackages {
        site_packages: String,
        #[source]
        problem: PathProblem,
    },
    #[error(
        "`{wheel}`: `{data_dir}/{scheme}` is not a wheel install scheme (scripts, data, headers, purelib, platlib)"
    )]
    Scheme { wheel: String, data_dir: String, scheme: String },
    #[error("`{wheel}`: {source}")]
    Read { wheel: String, source: std::io::Error },
    #[error("`{wheel}`: {source}")]
    Place { wheel: String, source: TreeError },
    #[error("bin.{name}: `{inner}` {problem}")]
    BinPath {
        name: String,
        inner: String,
        #[source]
        problem: PathProblem,
    },
    #[error("bin.{name}: `{inner}` is not a file in `{wheel}`; list the wheel (`unzip -l`) for the right path")]
    BinMissing { name: String, inner: String, wheel: String },
    #[error("`{}`: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("`{wheel}`: member `{member}` is not a regular file; wheels hold regular files only")]
    NotAFile { wheel: String, member: String },
}

pub struct Install<'a> {
    /// Normalized destination prefix (empty = `/`).
    pub dest: &'a [u8],
    pub site_packages: &'a str,
    pub bin: &'a BTreeMap<String, String>,
    pub owner: Option<(u64, u64)>,
}

/// What an install linked, for messages and tests.
#[derive(Debug, Default)]
pub struct Installed {
    pub links: Vec<String>,
}

fn first_component(p: &[u8]) -> (&[u8], &[u8]) {
    match p.iter().position(|b| *b == b'/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (p, &[]),
    }
}

/// Up to `limit` bytes of a file node's content.
fn read_head(node: &Node, limit: u64) -> std::io::Result<Vec<u8>> {
    let Kind::File { size, content } = &node.kind else { return Ok(Vec::new()) };
    let n = (*size).min(limit);
    match content {
        Content::Bytes(b) => Ok(b[..n as usize].to_vec()),
        Content::Host(p) | Content::HostToHash(p) => {
            let mut v = Vec::new();
            std::fs::File::open(p)?.take(n).read_to_end(&mut v)?;
            Ok(v)
        }
        Content::Slice { file, offset } => {
            let mut f = std::fs::File::open(file.as_ref())?;
            f.seek(SeekFrom::Start(*offset))?;
            let mut v = Vec::new();
            f.take(n).read_to_end(&mut v)?;
            Ok(v)
        }
    }
}

/// The relative path from directory `from` to `to` (both normalized).
fn relative(from: &[u8], to: &[u8]) -> Vec<u8> {
    let a: Vec<&[u8]> = from.split(|b| *b == b'/').filter(|c| !c.is_empty()).collect();
    let b: Vec<&[u8]> = to.split(|b| *b == b'/').filter(|c| !c.is_empty()).collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<&[u8]> = vec![b".."; a.len() - common];
    parts.extend_from_slice(&b[common..]);
    parts.join(&b'/')
}

/// Names under `[console_scripts]` in an entry_points.txt.
fn console_scripts(text: &str) -> Vec<String> {
    let mut in_section = false;
    let mut names = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == "[console_scripts]";
        } else if in_section {
            if let Some((name, _)) = line.split_once('=') {
                let name = name.trim();
                if !name.is_empty() && !name.contains('/') && !name.starts_with('#') {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// Install `wheel` into `tree` (see the module comment).
pub fn wheel_into_tree(wheel: &Path, opts: &Install, tree: &mut Tree, spool: &Path) -> Result<Installed, InstallError> {
    let w = read_wheel(wheel, spool)?;
    let wname = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut dist_infos: Vec<Vec<u8>> =
        w.iter().map(|(p, _)| first_component(p).0.to_vec()).filter(|c| c.ends_with(b".dist-info")).collect();
    dist_infos.dedup();
    let [dist_info] = dist_infos.as_slice() else {
        return Err(InstallError::NotAWheel { wheel: wname });
    };
    let stem = &dist_info[..dist_info.len() - b".dist-info".len()];
    let data_dir = [stem, b".data"].concat();
    let dist_name = display(stem.split(|b| *b == b'-').next().unwrap_or(stem));
    let dest = opts.dest;
    let bad_site = |problem| InstallError::SitePackages { site_packages: opts.site_packages.to_string(), problem };
    let site = if opts.site_packages.starts_with('/') {
        normalize_dest(opts.site_packages).map_err(bad_site)?
    } else {
        let rel = normalize_dest(opts.site_packages).map_err(bad_site)?;
        join(dest, &rel)
    };
    let bin_dir = join(dest, b"bin");

    // Where a member of the wheel lands (None: nothing, e.g. a scheme directory itself).
    let place = |p: &[u8]| -> Result<Option<(Vec<u8>, bool)>, InstallError> {
        let (first, rest) = first_component(p);
        if first != data_dir.as_slice() {
            return Ok(Some((join(&site, p), false)));
        }
        let (scheme, rest) = first_component(rest);
        if rest.is_empty() {
            return Ok(None);
        }
        Ok(Some(match scheme {
            b"scripts" => (join(&bin_dir, rest), true),
            b"data" => (join(dest, rest), false),
            b"headers" => (join(&join(dest, format!("include/{dist_name}").as_bytes()), rest), false),
            b"purelib" | b"platlib" => (join(&site, rest), false),
            other => {
                return Err(InstallError::Scheme {
                    wheel: wname.clone(),
                    data_dir: display(&data_dir),
                    scheme: display(other),
                })
            }
        }))
    };

    let io = |source| InstallError::Read { wheel: wname.clone(), source };
    let placed = |source| InstallError::Place { wheel: wname.clone(), source };
    let mut installed = Installed::default();
    for (p, node) in w.iter() {
        if node.implicit {
            continue;
        }
        let Some((to, script)) = place(p)? else { continue };
        let mut node = node.clone();
        if script && matches!(node.kind, Kind::File { .. }) {
            node.mode |= 0o755;
            let head = read_head(&node, 256).map_err(io)?;
            if head.starts_with(b"#!python") {
                let whole = read_head(&node, u64::MAX).map_err(io)?;
                let body = whole.splitn(2, |b| *b == b'\n').nth(1).unwrap_or(&[]);
                node =
                    Node { kind: Node::bytes([b"#!/usr/bin/env python3\n".as_slice(), body].concat(), 0).kind, ..node };
            }
        }
        if let Some((u, g)) = opts.owner {
            node.uid = u;
            node.gid = g;
        }
        tree.insert(to, node).map_err(placed)?;
    }

    // Links: console scripts backed by a shipped program, then the `bin` map.
    let mut links: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let ep_path = join(dist_info, b"entry_points.txt");
    if let Some(ep) = w.get(&ep_path) {
        let text = String::from_utf8_lossy(&read_head(ep, 1 << 20).map_err(io)?).into_owned();
        for name in console_scripts(&text) {
            if tree.get(&join(&bin_dir, name.as_bytes())).is_some() {
                continue;
            }
            let suffix = format!("bin/{name}");
            let candidate = w
                .iter()
                .filter(|(p, n)| {
                    matches!(n.kind, Kind::File { .. })
                        && n.mode & 0o111 != 0
                        && (p.as_slice() == suffix.as_bytes() || p.ends_with(format!("/{suffix}").as_bytes()))
                        && first_component(p).0 != data_dir.as_slice()
                })
                .map(|(p, _)| p.clone())
                .min_by_key(|p| (p.len(), p.clone()));
            if let Some(c) = candidate {
                links.insert(name, c);
            }
        }
    }
    for (name, inner) in opts.bin {
        let inner = normalize_member(inner.as_bytes()).map_err(|problem| InstallError::BinPath {
            name: name.clone(),
            inner: inner.clone(),
            problem,
        })?;
        if !w.get(&inner).is_some_and(|n| matches!(n.kind, Kind::File { .. } | Kind::Symlink(_))) {
            return Err(InstallError::BinMissing { name: name.clone(), inner: display(&inner), wheel: wname.clone() });
        }
        links.insert(name.clone(), inner);
    }
    for (name, inner) in links {
        let Some((target, _)) = place(&inner)? else { continue };
        let link = join(&bin_dir, name.as_bytes());
        let mut node = Node::new(Kind::Symlink(relative(&bin_dir, &target)), 0o777);
        if let Some((u, g)) = opts.owner {
            node.uid = u;
            node.gid = g;
        }
        tree.remove_subtree(&link);
        tree.insert(link.clone(), node).map_err(placed)?;
        installed.links.push(format!("/{}", display(&link)));
    }
    Ok(installed)
}

/// The wheel's files as a tree, read with the layer's archive reader (safe
/// names, nothing written outside the spool directory `spool`). A wheel
/// holds regular files only: each gets the mode pip gives it (0755 when the
/// archive marks it executable, else 0644), directories are implied, and a
/// link is refused.
fn read_wheel(wheel: &Path, spool: &Path) -> Result<Tree, InstallError> {
    let mut raw = Tree::new();
    crate::layer::archive::read_into(wheel, &mut raw, &Placement::default(), spool)?;
    let mut tree = Tree::new();
    for (name, node) in raw.iter() {
        let mode = if node.mode & 0o111 != 0 { 0o755 } else { 0o644 };
        match &node.kind {
            Kind::Dir => {}
            Kind::File { .. } => tree
                .insert(name.clone(), Node::new(node.kind.clone(), mode))
                .map_err(|source| InstallError::Place { wheel: wheel.display().to_string(), source })?,
            _ => return Err(InstallError::NotAFile { wheel: wheel.display().to_string(), member: display(name) }),
        }
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(relative(b"usr/local/bin", b"usr/local/lib/x/bin/cmake"), b"../lib/x/bin/cmake");
        assert_eq!(relative(b"usr/local/bin", b"opt/y"), b"../../../opt/y");
        assert_eq!(relative(b"", b"a/b"), b"a/b");
    }

    #[test]
    fn entry_points() {
        let t = "[console_scripts]\ncmake = cmake:cmake\nctest=cmake:ctest\n\n[gui_scripts]\nx = y:z\n";
        assert_eq!(console_scripts(t), ["cmake", "ctest"]);
    }

    fn wheel(dir: &Path, files: &[(&str, &[u8], u32)]) -> std::path::PathBuf {
        let p = dir.join("demo-1.0-py3-none-any.whl");
        let mut z = zip::ZipWriter::new(std::fs::File::create(&p).unwrap());
        for (name, data, mode) in files {
            let o = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
            z.start_file(*name, o).unwrap();
            std::io::Write::write_all(&mut z, data).unwrap();
        }
        z.finish().unwrap();
        p
    }

    #[test]
    fn layout_and_links() {
        let d = tempfile::tempdir().unwrap();
        let whl = wheel(
            d.path(),
            &[
                ("demo/__init__.py", b"", 0o644),
                ("demo/data/bin/demo", b"\x7fELF", 0o755),
                ("demo-1.0.data/scripts/tool", b"#!python\nprint(1)\n", 0o644),
                ("demo-1.0.data/data/share/x.txt", b"x", 0o644),
                (
                    "demo-1.0.dist-info/entry_points.txt",
                    b"[console_scripts]\ndemo = demo:main\npyonly = demo:py\n",
                    0o644,
                ),
                ("demo-1.0.dist-info/RECORD", b"", 0o644),
            ],
        );
        let bin = BTreeMap::new();
        let opts = Install { dest: b"usr/local", site_packages: "lib/python3/site-packages", bin: &bin, owner: None };
        let mut t = Tree::new();
        let r = wheel_into_tree(&whl, &opts, &mut t, d.path()).unwrap();
        assert_eq!(r.links, ["/usr/local/bin/demo"]);
        let Kind::Symlink(target) = &t.get(b"usr/local/bin/demo").unwrap().kind else { panic!() };
        assert_eq!(target, b"../lib/python3/site-packages/demo/data/bin/demo");
        let tool = t.get(b"usr/local/bin/tool").unwrap();
        assert_eq!(tool.mode, 0o755);
        assert_eq!(read_head(tool, 100).unwrap(), b"#!/usr/bin/env python3\nprint(1)\n");
        assert!(t.get(b"usr/local/share/x.txt").is_some());
        assert!(t.get(b"usr/local/lib/python3/site-packages/demo-1.0.dist-info/RECORD").is_some());
        assert!(t.get(b"usr/local/bin/pyonly").is_none(), "pure-Python console scripts are left out");

        let mut bad = BTreeMap::new();
        bad.insert("x".to_string(), "demo/nope".to_string());
        let opts = Install { bin: &bad, ..opts };
        let e = wheel_into_tree(&whl, &opts, &mut Tree::new(), d.path()).unwrap_err().to_string();
        assert!(e.contains("bin.x") && e.contains("demo/nope"), "{e}");
    }

    #[test]
    fn members_get_pips_modes_and_nothing_but_files_or_safe_names_pass() {
        let d = tempfile::tempdir().unwrap();
        let whl = wheel(
            d.path(),
            &[("demo/run", b"x", 0o775), ("demo/secret", b"y", 0o600), ("demo-1.0.dist-info/RECORD", b"", 0o644)],
        );
        let t = read_wheel(&whl, d.path()).unwrap();
        assert_eq!(t.get(b"demo/run").unwrap().mode, 0o755);
        assert_eq!(t.get(b"demo/secret").unwrap().mode, 0o644);
        let escape = d.path().join("escape");
        std::fs::create_dir(&escape).unwrap();
        let whl = wheel(&escape, &[("../evil", b"x", 0o644)]);
        let e = read_wheel(&whl, d.path()).unwrap_err().to_string();
        assert!(e.contains("../evil"), "{e}");
        let link = d.path().join("link");
        std::fs::create_dir(&link).unwrap();
        let p = link.join("demo-1.0-py3-none-any.whl");
        let mut z = zip::ZipWriter::new(std::fs::File::create(&p).unwrap());
        z.add_symlink("demo/l", "/etc/passwd", zip::write::SimpleFileOptions::default()).unwrap();
        z.finish().unwrap();
        let e = read_wheel(&p, d.path()).unwrap_err().to_string();
        assert!(e.contains("demo/l") && e.contains("regular files only"), "{e}");
    }
}
