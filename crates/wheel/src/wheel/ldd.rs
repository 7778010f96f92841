//! Resolving the libraries an ELF file needs, without running anything,
//! the way auditwheel's `lddtree` does (so `quarry wheel check` reports the
//! same external libraries and policy): the file's RPATH (or RUNPATH, which
//! wins when both exist) with `$ORIGIN` expanded, the first file's RPATH and
//! RUNPATH for every dependency, LD_LIBRARY_PATH, the directories of
//! /etc/ld.so.conf, the trusted directories and the interpreter's directory.
//!
//! Over 400 lines: one resolver that follows ld.so's whole search order
//! (RPATH, LD_LIBRARY_PATH, RUNPATH, ld.so.conf and its includes, the
//! default directories); 55 of them are its tests.

use super::WheelError;
use crate::elf::{self, ElfInfo};
use globset::{Glob, GlobMatcher};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Which C library a tree was linked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Libc {
    Glibc,
    Musl,
}

/// One library in a dependency tree.
#[derive(Debug, Clone)]
pub struct Library {
    pub soname: String,
    /// Where it was found (search directory + soname).
    pub path: Option<PathBuf>,
    /// That path with symbolic links followed; None when not found.
    pub realpath: Option<PathBuf>,
    pub info: Option<Arc<ElfInfo>>,
    /// Its own DT_NEEDED, excluded ones left out.
    pub needed: Vec<String>,
}

/// The dependency tree of one ELF file.
#[derive(Debug, Clone)]
pub struct Tree {
    pub path: PathBuf,
    pub info: Arc<ElfInfo>,
    pub libc: Option<Libc>,
    /// DT_NEEDED of the file, excluded ones left out.
    pub needed: Vec<String>,
    /// Every library reached, by soname (the interpreter included).
    pub libraries: BTreeMap<String, Library>,
}

impl Tree {
    /// True when every library in the tree was found.
    pub fn fully_resolved(&self) -> bool {
        self.libraries.values().all(|l| l.realpath.is_some())
    }
}

/// Search directories that do not depend on the file being resolved.
#[derive(Debug, Clone, Default)]
pub struct SystemPaths {
    /// From LD_LIBRARY_PATH.
    pub env: Vec<PathBuf>,
    /// From /etc/ld.so.conf (and its includes), then the trusted directories.
    pub conf: Vec<PathBuf>,
    /// Where an image's files are mirrored: its absolute search directories
    /// (these, RPATH entries, the interpreter's) are looked up under it.
    /// None: this machine.
    pub root: Option<PathBuf>,
}

const TRUSTED_DIRS: [&str; 4] = ["/lib", "/lib64", "/usr/lib", "/usr/lib64"];

impl SystemPaths {
    /// This machine's paths.
    pub fn from_host() -> SystemPaths {
        let env = std::env::var("LD_LIBRARY_PATH").map(|v| parse_ld_paths(&v, None, None)).unwrap_or_default();
        let mut conf = dedupe(parse_ld_so_conf(Path::new("/etc/ld.so.conf"), None, 0));
        conf.retain(|p| p.is_dir());
        conf.extend(TRUSTED_DIRS.map(PathBuf::from));
        SystemPaths { env, conf, root: None }
    }

    /// An image's paths: its files (the libraries it resolves, its
    /// /etc/ld.so.conf) mirrored under `root` at their image paths, and the
    /// LD_LIBRARY_PATH of its environment.
    pub fn from_image(root: &Path, ld_library_path: &str) -> SystemPaths {
        let env = parse_ld_paths(ld_library_path, None, Some(root));
        let mut conf = dedupe(parse_ld_so_conf(&root.join("etc/ld.so.conf"), Some(root), 0));
        conf.retain(|p| p.is_dir());
        conf.extend(TRUSTED_DIRS.map(|d| rooted(Some(root), Path::new(d))));
        SystemPaths { env, conf, root: Some(root.to_path_buf()) }
    }

    /// A path as the machine that owns it names it: a path under the image
    /// mirror becomes the image's path (for messages and reports).
    pub fn display_path(&self, p: &Path) -> PathBuf {
        match self.root.as_deref().and_then(|r| p.strip_prefix(r).ok()) {
            Some(rel) => Path::new("/").join(rel),
            None => p.to_path_buf(),
        }
    }
}

/// An absolute path of the searched machine as a path here: under `root`
/// for an image mirror, unchanged for this machine.
fn rooted(root: Option<&Path>, p: &Path) -> PathBuf {
    match root {
        Some(r) => normpath(&r.join(normpath(&Path::new("/").join(p)).strip_prefix("/").unwrap_or(p))),
        None => p.to_path_buf(),
    }
}

/// Resolves trees, caching what it has read and remembering what
/// `--exclude` left out.
pub struct Resolver {
    system: SystemPaths,
    exclude: Vec<GlobMatcher>,
    cache: HashMap<PathBuf, Option<Arc<ElfInfo>>>,
    /// Sonames left out by an exclude pattern, over every tree resolved.
    pub excluded: BTreeSet<String>,
}

/// The search state the first file of a tree passes to its dependencies.
struct MainPaths {
    rpath: Vec<PathBuf>,
    runpath: Vec<PathBuf>,
    interp: Vec<PathBuf>,
}

impl Resolver {
    /// `exclude`: glob patterns matched (like Python's fnmatch, `*` crosses
    /// `/`) against each needed soname and each resolved path.
    pub fn new(system: SystemPaths, exclude: &[String]) -> Result<Resolver, WheelError> {
        let exclude = exclude
            .iter()
            .map(|p| {
                Glob::new(p)
                    .map(|g| g.compile_matcher())
                    .map_err(|e| WheelError::Policy(format!("--exclude `{p}` is not a valid glob: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Resolver { system, exclude, cache: HashMap::new(), excluded: BTreeSet::new() })
    }

    fn is_excluded(&self, s: &str) -> bool {
        self.exclude.iter().any(|m| m.is_match(s))
    }

    /// Read (once) the ELF facts of a library candidate; None when it is not
    /// a readable ELF file (it is then skipped, like a missing file).
    fn library_info(&mut self, path: &Path) -> Option<Arc<ElfInfo>> {
        self.cache.entry(path.to_path_buf()).or_insert_with(|| elf::read(path).ok().map(Arc::new)).clone()
    }

    /// The dependency tree of the ELF file at `path` (an absolute path).
    pub fn ldd(&mut self, path: &Path) -> Result<Tree, WheelError> {
        let info = Arc::new(elf::read(path)?);
        let mut libraries = BTreeMap::new();
        let mut libc = None;
        let mut interp_dirs = Vec::new();
        if let Some(interp) = &info.interpreter {
            let root = self.system.root.as_deref();
            let image_interp = normpath(Path::new(interp));
            let interp_path = rooted(root, &image_interp);
            let soname = interp_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            libc = Some(if soname.starts_with("ld-musl-") { Libc::Musl } else { Libc::Glibc });
            let dir = image_interp.parent().unwrap_or(Path::new("/")).to_path_buf();
            interp_dirs = [normpath(&dir), normpath(&Path::new("/usr").join(dir.strip_prefix("/").unwrap_or(&dir)))]
                .map(|d| rooted(root, &d))
                .to_vec();
            libraries.insert(
                soname.clone(),
                Library {
                    soname,
                    path: Some(interp_path.clone()),
                    realpath: Some(follow_links_in(&interp_path, root)),
                    info: Some(info.clone()),
                    needed: Vec::new(),
                },
            );
        }
        for soname in &info.needed {
            if soname.starts_with("libc.musl-") || soname.starts_with("ld-musl-") {
                libc.get_or_insert(Libc::Musl);
            } else if soname == "libc.so.6" || soname.starts_with("ld-linux-") || soname.starts_with("ld64.so.") {
                libc.get_or_insert(Libc::Glibc);
            }
        }
        let (rpath, runpath) = search_paths(&info, path, self.system.root.as_deref());
        let main = MainPaths { rpath: rpath.clone(), runpath: runpath.clone(), interp: interp_dirs };
        let needed = self.resolve_needed(&info, &rpath, &runpath, &main, &mut libraries)?;
        Ok(Tree { path: path.to_path_buf(), info, libc, needed, libraries })
    }

    fn resolve_needed(
        &mut self,
        info: &Arc<ElfInfo>,
        rpath: &[PathBuf],
        runpath: &[PathBuf],
        main: &MainPaths,
        libraries: &mut BTreeMap<String, Library>,
    ) -> Result<Vec<String>, WheelError> {
        let search: Vec<PathBuf> = main
            .rpath
            .iter()
            .chain(rpath)
            .chain(runpath)
            .chain(&self.system.env)
            .chain(&main.runpath)
            .chain(&self.system.conf)
            .chain(&main.interp)
            .cloned()
            .collect();
        let mut excluded_here = BTreeSet::new();
        for soname in &info.needed {
            if libraries.contains_key(soname) || excluded_here.contains(soname) {
                continue;
            }
            if self.is_excluded(soname) {
                excluded_here.insert(soname.clone());
                self.excluded.insert(soname.clone());
                continue;
            }
            let unresolved =
                Library { soname: soname.clone(), path: None, realpath: None, info: None, needed: Vec::new() };
            if is_libpython(soname) {
                // Never analysed: repair removes the dependency instead.
                libraries.insert(soname.clone(), unresolved);
                continue;
            }
            let Some((path, realpath, dep)) = self.find_lib(info, soname, &search) else {
                libraries.insert(soname.clone(), unresolved);
                continue;
            };
            // A path pattern names the path on the machine searched (an
            // image's own path, not where its files are mirrored here).
            if self.is_excluded(&self.system.display_path(&realpath).to_string_lossy()) {
                excluded_here.insert(soname.clone());
                self.excluded.insert(soname.clone());
                continue;
            }
            libraries.insert(
                soname.clone(),
                Library {
                    soname: soname.clone(),
                    path: Some(path.clone()),
                    realpath: Some(realpath.clone()),
                    info: Some(dep.clone()),
                    needed: Vec::new(),
                },
            );
            let (dep_rpath, dep_runpath) = search_paths(&dep, &realpath, self.system.root.as_deref());
            let dep_needed = self.resolve_needed(&dep, &dep_rpath, &dep_runpath, main, libraries)?;
            if let Some(lib) = libraries.get_mut(soname) {
                lib.needed = dep_needed;
            }
        }
        Ok(info.needed.iter().filter(|n| !excluded_here.contains(*n)).cloned().collect())
    }

    /// The first library named `soname` in `search` that this file can load.
    fn find_lib(
        &mut self,
        info: &ElfInfo,
        soname: &str,
        search: &[PathBuf],
    ) -> Option<(PathBuf, PathBuf, Arc<ElfInfo>)> {
        for dir in search {
            let path = dir.join(soname);
            let target = follow_links_in(&path, self.system.root.as_deref());
            if !target.exists() {
                continue;
            }
            if let Some(dep) = self.library_info(&target) {
                if info.is_compatible(&dep) {
                    return Some((path, target, dep));
                }
            }
        }
        None
    }
}

/// RPATH and RUNPATH of a file, parsed; RPATH is dropped when RUNPATH
/// names an existing directory (the loader ignores RPATH then).
fn search_paths(info: &ElfInfo, path: &Path, root: Option<&Path>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut rpath = info.rpath.as_deref().map(|r| parse_ld_paths(r, Some(path), root)).unwrap_or_default();
    let runpath = info.runpath.as_deref().map(|r| parse_ld_paths(r, Some(path), root)).unwrap_or_default();
    if !runpath.is_empty() {
        rpath.clear();
    }
    (rpath, runpath)
}

/// `libpython3.11.so.1.0` and friends (auditwheel's `^libpython\d+\.\d+m?.so(\.\d)*$`).
pub fn is_libpython(soname: &str) -> bool {
    fn digits(s: &str) -> Option<&str> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (n > 0).then(|| &s[n..])
    }
    let check = || -> Option<()> {
        let s = soname.strip_prefix("libpython")?;
        let s = digits(s)?.strip_prefix('.')?;
        let s = digits(s)?;
        let s = s.strip_prefix('m').unwrap_or(s);
        let mut chars = s.chars();
        chars.next()?; // the pattern's unescaped `.` matches any character
        let mut s = chars.as_str().strip_prefix("so")?;
        while !s.is_empty() {
            let b = s.as_bytes();
            if b.len() < 2 || b[0] != b'.' || !b[1].is_ascii_digit() {
                return None;
            }
            s = &s[2..];
        }
        Some(())
    };
    check().is_some()
}

/// Split a colon-separated search path; `$ORIGIN` is the directory of
/// `origin_of` (a path here; entries using it are dropped when there is no
/// file); other entries are paths of the searched machine (see [`rooted`]);
/// directories that do not exist are dropped.
pub fn parse_ld_paths(value: &str, origin_of: Option<&Path>, root: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in value.split(':') {
        let p = if entry.is_empty() {
            if root.is_some() {
                continue; // the image process's working directory: unknown here
            }
            std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
        } else if entry.contains("$ORIGIN") || entry.contains("${ORIGIN}") {
            let Some(file) = origin_of else { continue };
            let abs = if file.is_absolute() {
                file.to_path_buf()
            } else {
                std::env::current_dir().unwrap_or_default().join(file)
            };
            let dir = abs.parent().unwrap_or(Path::new("/")).to_string_lossy().into_owned();
            PathBuf::from(entry.replace("${ORIGIN}", &dir).replace("$ORIGIN", &dir))
        } else {
            rooted(root, Path::new(entry))
        };
        out.push(normpath(&p));
    }
    let mut out = dedupe(out);
    out.retain(|p| p.is_dir());
    out
}

/// The directories named by an ld.so.conf file (`path`, a path here) and
/// its `include`s, as paths here (see [`rooted`]).
fn parse_ld_so_conf(path: &Path, root: Option<&Path>, depth: usize) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    if depth > 8 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(pattern) = line.strip_prefix("include ") {
            let pattern = pattern.trim();
            let pattern = if pattern.starts_with('/') {
                rooted(root, Path::new(pattern))
            } else {
                path.parent().unwrap_or(Path::new("/")).join(pattern)
            };
            for inc in glob_files(&pattern) {
                out.extend(parse_ld_so_conf(&inc, root, depth + 1));
            }
        } else {
            out.push(rooted(root, &normpath(Path::new(line))));
        }
    }
    out
}

/// Files matching a pattern whose wildcards are in the last component
/// (`/etc/ld.so.conf.d/*.conf`), sorted.
fn glob_files(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let Ok(matcher) = Glob::new(&name.to_string_lossy()).map(|g| g.compile_matcher()) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> =
        entries.filter_map(Result::ok).filter(|e| matcher.is_match(e.file_name())).map(|e| e.path()).collect();
    out.sort();
    out
}

fn dedupe(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    paths.into_iter().filter(|p| seen.insert(p.clone())).collect()
}

/// Lexical normalization (`a/./b/../c` -> `a/c`), as Python's normpath.
pub fn normpath(p: &Path) -> PathBuf {
    let mut out: Vec<Component> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) => {}
                _ => out.push(c),
            },
            c => out.push(c),
        }
    }
    if out.is_empty() {
        return PathBuf::from(".");
    }
    out.iter().collect()
}

/// Follow symbolic links on the last component until a non-link is reached.
pub fn follow_links(path: &Path) -> PathBuf {
    follow_links_in(path, None)
}

/// [`follow_links`] in an image mirror: absolute link targets are image
/// paths, looked up under `root`.
pub fn follow_links_in(path: &Path, root: Option<&Path>) -> PathBuf {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(target) if target.is_absolute() => p = rooted(root, &target),
            Ok(target) => p = p.parent().unwrap_or(Path::new("/")).join(target),
            Err(_) => break,
        }
    }
    normpath(&p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpython_names() {
        assert!(is_libpython("libpython3.11.so.1.0"));
        assert!(is_libpython("libpython3.6m.so.1"));
        assert!(is_libpython("libpython3.11.so"));
        assert!(!is_libpython("libpython3.so"));
        assert!(!is_libpython("libpython3.11.so.10"));
        assert!(!is_libpython("libffi.so.8"));
    }

    #[test]
    fn paths() {
        assert_eq!(normpath(Path::new("/a/./b/../c//d")), PathBuf::from("/a/c/d"));
        assert_eq!(normpath(Path::new("/../a")), PathBuf::from("/a"));
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("pkg/mod.so");
        std::fs::create_dir_all(dir.path().join("pkg.libs")).unwrap();
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        let got = parse_ld_paths("$ORIGIN/../pkg.libs:${ORIGIN}/missing:/nonexistent", Some(&lib), None);
        assert_eq!(got, vec![dir.path().join("pkg.libs")]);
        assert!(parse_ld_paths("$ORIGIN", None, None).is_empty());

        std::fs::write(dir.path().join("real.so.1.2"), b"x").unwrap();
        std::os::unix::fs::symlink("real.so.1.2", dir.path().join("real.so.1")).unwrap();
        assert_eq!(follow_links(&dir.path().join("real.so.1")), dir.path().join("real.so.1.2"));
    }

    #[test]
    fn image_mirror_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["etc/ld.so.conf.d", "opt/x/lib", "usr/lib/x86_64-linux-gnu", "env/lib"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("etc/ld.so.conf"), "include /etc/ld.so.conf.d/*.conf\n").unwrap();
        std::fs::write(root.join("etc/ld.so.conf.d/x.conf"), "/opt/x/lib\n/missing\n").unwrap();
        let sys = SystemPaths::from_image(root, "/env/lib:/nowhere:");
        assert_eq!(sys.env, vec![root.join("env/lib")]);
        assert_eq!(sys.conf[0], root.join("opt/x/lib"));
        assert!(sys.conf.contains(&root.join("usr/lib")), "{:?}", sys.conf);
        // RPATH entries of the image are image paths; $ORIGIN is where the file is here.
        let file = root.join("opt/x/lib/libx.so");
        let got = parse_ld_paths("/usr/lib/x86_64-linux-gnu:$ORIGIN", Some(&file), Some(root));
        assert_eq!(got, vec![root.join("usr/lib/x86_64-linux-gnu"), root.join("opt/x/lib")]);
        // An absolute link target stays inside the mirror.
        std::fs::write(root.join("usr/lib/x86_64-linux-gnu/liby.so.1.2"), b"x").unwrap();
        std::os::unix::fs::symlink("/usr/lib/x86_64-linux-gnu/liby.so.1.2", root.join("opt/x/lib/liby.so.1")).unwrap();
        let real = follow_links_in(&root.join("opt/x/lib/liby.so.1"), Some(root));
        assert_eq!(real, root.join("usr/lib/x86_64-linux-gnu/liby.so.1.2"));
        assert_eq!(sys.display_path(&real), PathBuf::from("/usr/lib/x86_64-linux-gnu/liby.so.1.2"));
        assert_eq!(rooted(Some(root), Path::new("/../etc")), root.join("etc"));
    }
}
