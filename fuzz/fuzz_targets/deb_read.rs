//! A `.deb` (`distro::deb::read_deb`): the ar archive, control and data
//! tars in any compression, the data tar read into a tree (no `..`, no
//! writes through links).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.deb");
    std::fs::write(&path, data).unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let _ = quarry::distro::deb::read_deb(&path, &spool);
});
