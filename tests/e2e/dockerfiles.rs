//! `dockerfiles/` holds the rendered Dockerfile of every shipped image; this
//! test renders them again and fails when one is stale.
//! Regenerate with: UPDATE_DOCKERFILES=1 cargo test --test e2e dockerfiles::

use crate::common;

use common::*;

#[test]
fn shipped_dockerfiles_are_current() {
    let images = repo().join("images");
    let mut stale = Vec::new();
    let mut count = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&images).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for def in entries.into_iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
        count += 1;
        let name = def.file_stem().unwrap().to_string_lossy().into_owned();
        let rel = format!("images/{name}.toml");
        let out = run_expect(quarry().current_dir(repo()).args(["dockerfile", &rel]), 0);
        let rendered = String::from_utf8(out.stdout).unwrap();
        let path = repo().join("dockerfiles").join(format!("{name}.Dockerfile"));
        if std::env::var_os("UPDATE_DOCKERFILES").is_some() {
            std::fs::write(&path, &rendered).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == rendered => {}
            _ => stale.push(format!("dockerfiles/{name}.Dockerfile")),
        }
    }
    assert!(count > 0, "no images/*.toml found");
    assert!(
        stale.is_empty(),
        "stale or missing: {stale:?}; regenerate with `UPDATE_DOCKERFILES=1 cargo test --test e2e dockerfiles::`"
    );
}
