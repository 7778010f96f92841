//! The native ELF editor (`elf::edit`): RPATH, SONAME and NEEDED edits
//! planned over any input, as `wheel repair` and `rocm package` make them.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lib.so");
    std::fs::write(&path, data).unwrap();
    let edits = quarry::elf::edit::ElfEdits {
        set_rpath: Some("$ORIGIN/../lib.libs:$ORIGIN/a/much/longer/path/than/the/string/table/had".into()),
        set_soname: Some("libfuzz-0123abcd.so.1".into()),
        replace_needed: vec![("libc.so.6".into(), "libc-renamed.so.6".into())],
        ..Default::default()
    };
    let _ = quarry::elf::edit::edit(&path, &edits);
});
