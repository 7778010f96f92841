//! The shape of the source tree, checked on every test run: no import
//! cycles between modules (at the top level, and among the children of any
//! module), every import pointing down the floors ARCHITECTURE.md lists,
//! no file of the build path over its size budget and no other file over
//! 400 lines without saying why, and no printing to stderr outside the
//! command line and the diagnostics sink, across every crate of the
//! workspace. The module graph is read from the whole of every source file (`use` statements and paths starting at
//! `crate::` or `super::`); test modules are left out, they may reach
//! anywhere: inline ones (`#[cfg(test)] mod tests { .. }`) are cut out of
//! their file wherever they sit, and files declared as test modules
//! (`#[cfg(test)] mod tests;`) are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source roots of the workspace: this package's `src/` and every
/// `crates/*/src`. Their top-level modules form one namespace: the crates
/// above re-export the ones below under the same module names
/// (`crate::oci` is `quarry_formats::oci`), so a path reads the same in
/// every crate and the floors below are checked across crates too; the
/// compiler holds the crates' own order.
fn roots() -> Vec<PathBuf> {
    let mut out = vec![src()];
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut members: Vec<PathBuf> =
        std::fs::read_dir(&crates).unwrap().flatten().map(|e| e.path().join("src")).filter(|p| p.is_dir()).collect();
    members.sort();
    out.extend(members);
    out
}

/// The directory of a top-level module, in whichever crate holds it.
fn module_dir(name: &str) -> Option<PathBuf> {
    roots().into_iter().map(|r| r.join(name)).find(|d| d.is_dir())
}

/// Every source file with its module path (`distro::below`; `` for lib.rs),
/// test-module files left out.
fn modules() -> Vec<(Vec<String>, PathBuf)> {
    let mut out = Vec::new();
    let mut test_files = BTreeSet::new();
    for (root, e) in roots().into_iter().flat_map(|r| {
        walkdir::WalkDir::new(&r).into_iter().filter_map(|e| e.ok()).map(move |e| (r.clone(), e)).collect::<Vec<_>>()
    }) {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        test_files.extend(test_module_files(p, &std::fs::read_to_string(p).unwrap()));
        let rel = p.strip_prefix(&root).unwrap();
        let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        let last = parts.pop().unwrap();
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" && stem != "main" {
            parts.push(stem.to_string());
        }
        if stem == "main" {
            continue;
        }
        out.push((parts, p.to_path_buf()));
    }
    out.retain(|(_, p)| !test_files.contains(p));
    out
}

/// The files of the modules `file` declares under `#[cfg(test)]` (`mod tests;`).
fn test_module_files(file: &Path, text: &str) -> Vec<PathBuf> {
    let dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => file.parent().unwrap().to_path_buf(),
        _ => file.with_extension(""),
    };
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        rest = &rest[i + "#[cfg(test)]".len()..];
        let decl = rest.trim_start();
        let Some((name, _)) = decl.strip_prefix("mod ").and_then(|d| d.split_once(';')) else { continue };
        let name = name.trim();
        if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push(dir.join(format!("{name}.rs")));
            out.push(dir.join(name).join("mod.rs"));
        }
    }
    out
}

/// The byte just past the `}` closing the block that opens at `open` (a
/// `{`), reading strings, raw strings, chars and comments as Rust does.
fn block_end(code: &str, open: usize) -> usize {
    let b = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let (mut i, mut depth) = (open, 0usize);
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => i = code[i..].find('\n').map_or(b.len(), |e| i + e),
            b'/' if b.get(i + 1) == Some(&b'*') => i = code[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 1),
            b'r' if (i == 0 || !is_ident(b[i - 1])) && matches!(b.get(i + 1), Some(b'"' | b'#')) => {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) == Some(&b'"') {
                    let close = format!("\"{}", "#".repeat(hashes));
                    let from = i + 2 + hashes;
                    i = code[from..].find(&close).map_or(b.len(), |e| from + e + close.len() - 1);
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            // A char literal ('{', '\'', '\u{7b}'); a lifetime ('a) has no closing quote.
            b'\'' => {
                if b.get(i + 1) == Some(&b'\\') {
                    i = code[i + 3..].find('\'').map_or(b.len(), |e| i + 3 + e);
                } else if let Some(c) = code[i + 1..].chars().next() {
                    if code[i + 1 + c.len_utf8()..].starts_with('\'') {
                        i += c.len_utf8() + 1;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// The file's code without its inline `#[cfg(test)]` modules, wherever they sit.
fn non_test_code(text: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(MARK) {
        let after = &rest[i + MARK.len()..];
        let decl = after.trim_start();
        let inline = decl.strip_prefix("mod ").is_some_and(|d| {
            let name_end = d.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(d.len());
            d[name_end..].trim_start().starts_with('{')
        });
        out.push_str(&rest[..i]);
        if inline {
            let open = rest.len() - decl.len() + decl.find('{').unwrap();
            rest = &rest[block_end(rest, open)..];
        } else {
            out.push_str(MARK);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Expand `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else { return vec![tree.split(" as ").next().unwrap().trim().to_string()] };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap()];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |e| format!("{prefix}{e}")))
        .collect()
}

/// Paths a file names that start at `crate::` or `super::`.
fn references(code: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = code;
    // `use` statements, braces expanded.
    while let Some(i) = rest.find("use ") {
        let before_ok = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b'_';
        let stmt_end = rest[i..].find(';').map(|e| i + e).unwrap_or(rest.len());
        if before_ok {
            let stmt: String = rest[i + 4..stmt_end].split_whitespace().collect::<Vec<_>>().join(" ");
            if stmt.starts_with("crate::") || stmt.starts_with("super::") {
                refs.extend(expand(&stmt));
            }
        }
        rest = &rest[(i + 4).min(rest.len())..];
    }
    // Paths in code.
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start).map(|i| i + from) {
            from = i + start.len();
            if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':') {
                continue;
            }
            let end = code[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map(|e| i + e)
                .unwrap_or(code.len());
            refs.push(code[i..end].trim_end_matches(':').to_string());
        }
    }
    refs
}

/// The module a path names, resolved from module `from` (longest known prefix).
fn resolve(path: &str, from: &[String], known: &BTreeSet<Vec<String>>, is_mod_rs: bool) -> Option<Vec<String>> {
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut base: Vec<String> = match segs.first() {
        Some(&"crate") => {
            segs.remove(0);
            Vec::new()
        }
        Some(&"super") => {
            // In `x/mod.rs` (module x) and in `x.rs` alike, `super` is x's parent.
            let _ = is_mod_rs;
            let mut b = from.to_vec();
            while segs.first() == Some(&"super") {
                segs.remove(0);
                b.pop()?;
            }
            b
        }
        _ => return None,
    };
    let mut best = base.clone();
    for s in segs {
        base.push(s.to_string());
        if known.contains(&base) {
            best = base.clone();
        } else {
            break;
        }
    }
    Some(best)
}

/// Edges between siblings: from the child of their common parent that holds
/// the referring file to the child that holds the referenced module.
fn graph() -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let mods = modules();
    let known: BTreeSet<Vec<String>> = mods.iter().map(|(m, _)| m.clone()).collect();
    let mut by_parent: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (m, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap();
        let is_mod_rs = file.file_name().is_some_and(|n| n == "mod.rs");
        for r in references(&non_test_code(&text)) {
            let Some(target) = resolve(&r, m, &known, is_mod_rs) else { continue };
            let common = m.iter().zip(&target).take_while(|(a, b)| a == b).count();
            // A module naming its ancestor or its own descendant is not an edge between siblings.
            if common == m.len() || common == target.len() {
                continue;
            }
            let parent = m[..common].to_vec();
            by_parent.entry(parent).or_default().entry(m[common].clone()).or_default().insert(target[common].clone());
        }
    }
    by_parent
}

/// A cycle in the graph, if there is one (as a path of names).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for next in edges.get(n).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == next).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if !state.contains_key(n) {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_reader_sees_what_it_should() {
    // The checks below rest on these.
    assert_eq!(expand("crate::a::{b, c::{d, e as f}}"), ["crate::a::b", "crate::a::c::d", "crate::a::c::e"]);
    let refs = references("use super::{x, y::Z};\nfn f() { crate::q::r(); let s = super::super::t; }");
    assert!(refs.contains(&"super::x".to_string()) && refs.contains(&"crate::q::r".to_string()), "{refs:?}");
    let known: BTreeSet<Vec<String>> =
        [vec!["a".to_string()], vec!["a".into(), "b".into()], vec!["c".into()]].into_iter().collect();
    let from = vec!["a".to_string(), "b".into()];
    assert_eq!(resolve("super::b::X", &from, &known, false).unwrap(), ["a", "b"]);
    assert_eq!(resolve("crate::c::d", &from, &known, false).unwrap(), ["c"]);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("a".into());
    assert_eq!(find_cycle(&edges).unwrap(), ["a", "b", "a"]);
    // A test module is cut out wherever it sits, braces in strings and chars
    // notwithstanding; a declared one (`mod tests;`) cuts nothing after it.
    let code = "use crate::a;\n#[cfg(test)]\nmod tests;\nuse crate::b;\n#[cfg(test)]\nmod t {\n    \
                fn f() { let _ = ('{', \"}}\", r#\"{\"#); } // }\n}\nuse crate::c;\n";
    let kept = non_test_code(code);
    assert!(["crate::a", "crate::b", "crate::c"].iter().all(|m| kept.contains(m)), "{kept}");
    assert!(!kept.contains("fn f"), "{kept}");
    assert_eq!(
        test_module_files(Path::new("/s/x/mod.rs"), "#[cfg(test)]\nmod tests;\n"),
        [Path::new("/s/x/tests.rs"), Path::new("/s/x/tests/mod.rs")]
    );
}

#[test]
fn no_two_crates_hold_a_module_of_one_name() {
    // `roots` reads the crates as one namespace of top-level modules.
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut twice = Vec::new();
    for root in roots() {
        for e in std::fs::read_dir(&root).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().trim_end_matches(".rs").to_string();
            if ["lib", "main"].contains(&name.as_str()) {
                continue;
            }
            if let Some(first) = seen.insert(name.clone(), root.clone()) {
                twice.push(format!("{name}: {} and {}", first.display(), root.display()));
            }
        }
    }
    assert!(twice.is_empty(), "modules of one name in two crates:\n{}", twice.join("\n"));
}

#[test]
fn no_import_cycles_between_modules() {
    let mut found = Vec::new();
    for (parent, edges) in graph() {
        if let Some(c) = find_cycle(&edges) {
            let at = if parent.is_empty() { "crate".to_string() } else { parent.join("::") };
            found.push(format!("in {at}: {}", c.join(" -> ")));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

/// The top-level modules each top-level module imports (its own excluded).
fn top_level_imports() -> BTreeMap<String, BTreeSet<String>> {
    graph().remove(&Vec::new()).unwrap_or_default()
}

#[test]
fn the_zip_engine_knows_nothing_of_wheels_or_rocm() {
    // `zip` is a floor that `wheel` and `rocm` build on, not a part of them.
    let imports = top_level_imports();
    let zip = imports.get("zip").cloned().unwrap_or_default();
    let above: Vec<&String> = zip.iter().filter(|m| *m == "wheel" || *m == "rocm").collect();
    assert!(above.is_empty(), "src/zip imports {above:?}");
    assert!(imports.get("wheel").is_some_and(|w| w.contains("zip")), "wheel writes through crate::zip");
    let wheel_files: Vec<String> = walkdir::WalkDir::new(module_dir("wheel").unwrap())
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("zip_") || n == "deflate" || n == "inflate_index.rs")
        .collect();
    assert!(wheel_files.is_empty(), "zip or deflate code back under the wheel module: {wheel_files:?}");
}

/// Lines of the file's own code (its inline test modules left out).
fn code_lines(path: &Path) -> usize {
    non_test_code(&std::fs::read_to_string(path).unwrap()).lines().count()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.into_path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect()
}

#[test]
fn build_path_files_stay_small() {
    // The middle of the house: definition -> plan -> build, the sources
    // and layers they run on, the cache and the OCI floor under them. No
    // file there may say why it is long: it is split instead.
    let mut over = Vec::new();
    for dir in ["definition", "plan", "build", "source", "layer", "cache", "oci"] {
        let Some(at) = module_dir(dir) else { panic!("{dir} is budgeted but gone: update this list") };
        for file in rust_files(&at) {
            let code = code_lines(&file);
            if code > 400 {
                over.push(format!("{} ({code} lines besides its tests)", file.display()));
            }
        }
    }
    assert!(over.is_empty(), "files over 400 lines:\n{}", over.join("\n"));
}

/// The line a long file's module docs give its reason on.
const LONG_FILE_REASON: &str = "//! Over 400 lines:";

#[test]
fn every_other_long_file_says_why() {
    let mut silent = Vec::new();
    for file in roots().iter().flat_map(|r| rust_files(r)) {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = text.lines().count();
        let docs: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).collect();
        if lines > 400 && !docs.iter().any(|l| l.starts_with(LONG_FILE_REASON)) {
            silent.push(format!("{} ({lines} lines)", file.display()));
        }
    }
    assert!(
        silent.is_empty(),
        "files over 400 lines without a `{LONG_FILE_REASON} ...` line in their module docs (split them, or say why):\n{}",
        silent.join("\n")
    );
}

/// The floors ARCHITECTURE.md lists under `## Floors`, top first: each a
/// numbered line naming its modules in backticks.
fn floors() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md")).unwrap();
    let section = text.split("\n## Floors").nth(1).expect("ARCHITECTURE.md has a `## Floors` section");
    let section = section.split("\n## ").next().unwrap();
    let mut out = Vec::new();
    for line in section.lines() {
        let Some((n, rest)) = line.split_once(". ") else { continue };
        if n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        // The names before the first `:`.
        let names = rest.split(':').next().unwrap();
        out.push(names.split('`').skip(1).step_by(2).map(str::to_string).collect());
    }
    out
}

#[test]
fn every_import_points_down_the_floors() {
    let floors = floors();
    let floor_of: BTreeMap<&str, usize> =
        floors.iter().enumerate().flat_map(|(i, f)| f.iter().map(move |m| (m.as_str(), i))).collect();
    let top: BTreeSet<String> =
        modules().into_iter().filter(|(m, _)| m.len() == 1).map(|(m, _)| m[0].clone()).collect();
    let listed: BTreeSet<String> = floor_of.keys().map(|m| m.to_string()).collect();
    let unlisted: Vec<&String> = top.difference(&listed).collect();
    let gone: Vec<&String> = listed.difference(&top).collect();
    assert!(unlisted.is_empty(), "modules ARCHITECTURE.md's floors do not list: {unlisted:?}");
    assert!(gone.is_empty(), "ARCHITECTURE.md's floors list modules that do not exist: {gone:?}");
    assert_eq!(floor_of.len(), floors.iter().map(Vec::len).sum::<usize>(), "a module on two floors");
    let mut up = Vec::new();
    for (from, targets) in top_level_imports() {
        for to in targets {
            if floor_of[to.as_str()] < floor_of[from.as_str()] {
                up.push(format!(
                    "{from} (floor {}) imports {to} (floor {})",
                    floor_of[from.as_str()] + 1,
                    floor_of[to.as_str()] + 1
                ));
            }
        }
    }
    assert!(up.is_empty(), "imports pointing up ARCHITECTURE.md's floors:\n{}", up.join("\n"));
}

#[test]
fn only_the_command_line_and_the_sink_print_to_stderr() {
    let allowed = ["cli", "diagnostics.rs", "progress.rs", "main.rs"];
    let mut found = Vec::new();
    for (root, e) in roots().into_iter().flat_map(|r| {
        walkdir::WalkDir::new(&r).into_iter().filter_map(|e| e.ok()).map(move |e| (r.clone(), e)).collect::<Vec<_>>()
    }) {
        let rel = e.path().strip_prefix(&root).unwrap();
        let first = rel.iter().next().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
        if e.path().extension().is_none_or(|x| x != "rs") || allowed.contains(&first.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        for (i, line) in non_test_code(&text).lines().enumerate() {
            if line.contains("eprintln!") || line.contains("eprint!") {
                found.push(format!("{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "library code printing to stderr (use log::warn! / log::info!):\n{}", found.join("\n"));
}

/// A command ends `Ok(status)` or `Err`: only `main` (`cli/mod.rs`, through `cli::exit`)
/// prints an error, so each failure is printed once and its exit status comes
/// from one mapping.
#[test]
fn no_command_prints_its_own_error() {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let mut found = Vec::new();
    for e in walkdir::WalkDir::new(&cli).into_iter().filter_map(|e| e.ok()) {
        let rel = e.path().strip_prefix(&cli).unwrap();
        if e.path().extension().is_none_or(|x| x != "rs") || ["exit.rs", "mod.rs"].iter().any(|m| rel == Path::new(m)) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        for (i, line) in non_test_code(&text).lines().enumerate() {
            let printing = line.contains("eprintln!(\"quarry: error") || line.contains("eprint!(\"quarry: error");
            if printing || line.contains(".exit_code()") {
                found.push(format!("src/cli/{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "commands printing their own error or choosing its status (return Err):\n{}",
        found.join("\n")
    );
}

/// ARCHITECTURE.md's module table: (the modules a row is about, the
/// top-level modules its "depends on" column names outside parentheses,
/// which say what of a module is used; None for a row that names none, such
/// as `cli`'s "everything below").
fn architecture_rows() -> Vec<(Vec<String>, Option<BTreeSet<String>>)> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md")).unwrap();
    let section = text.split("\n## Modules").nth(1).expect("ARCHITECTURE.md has a `## Modules` section");
    let section = section.split("\n## ").next().unwrap();
    let names = |cell: &str| -> Vec<String> {
        let mut outside = String::new();
        let mut depth = 0usize;
        for c in cell.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ if depth == 0 => outside.push(c),
                _ => {}
            }
        }
        outside
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|n| n.trim_end_matches('/').split("::").next().unwrap().to_string())
            .collect()
    };
    let mut out = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let (module, depends) = (cells[0], cells[cells.len() - 1]);
        let named: BTreeSet<String> = names(depends).into_iter().collect();
        let none = depends.trim() == "—";
        out.push((names(module), (none || !named.is_empty()).then_some(named)));
    }
    out
}

#[test]
fn architecture_says_what_each_module_imports() {
    let imports = top_level_imports();
    // The ground floor's crate sits under every other: a row need not name
    // its modules (it may, and then they must be imported).
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/base/src");
    let ground: BTreeSet<String> = std::fs::read_dir(&base)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    let mut wrong = Vec::new();
    let mut rows_for = BTreeSet::new();
    for (modules, named) in architecture_rows() {
        rows_for.extend(modules.iter().cloned());
        let Some(named) = named else { continue };
        // A row about several modules names what any of them imports.
        let actual: BTreeSet<String> = modules
            .iter()
            .flat_map(|m| imports.get(m).cloned().unwrap_or_default())
            .filter(|m| !modules.contains(m))
            .collect();
        if actual.difference(&named).any(|m| !ground.contains(m)) || !named.is_subset(&actual) {
            let missing: Vec<&String> = actual.difference(&named).filter(|m| !ground.contains(*m)).collect();
            let extra: Vec<&String> = named.difference(&actual).collect();
            wrong.push(format!("{}: not named {missing:?}, named but not imported {extra:?}", modules.join(", ")));
        }
    }
    let unlisted: Vec<String> = floors().into_iter().flatten().filter(|m| !rows_for.contains(m)).collect();
    assert!(unlisted.is_empty(), "modules without a row in ARCHITECTURE.md's module table: {unlisted:?}");
    assert!(wrong.is_empty(), "ARCHITECTURE.md's \"depends on\" column is wrong:\n{}", wrong.join("\n"));
}
