//! A fat HIP binary's wrappers and their bundle offsets
//! (`elf::kpack_ref::read_fat_binary`), what `wheel split` rewrites.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libfat.so");
    std::fs::write(&path, data).unwrap();
    let _ = quarry::elf::kpack_ref::read_fat_binary(&path);
});
