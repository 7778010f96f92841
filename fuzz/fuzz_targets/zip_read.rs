//! Reading a wheel (`wheel::archive::WheelZip`): the central directory, the
//! member names (refused when they would leave the destination) and their
//! contents, extracted into a scratch directory.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzz-1.0-py3-none-any.whl");
    std::fs::write(&path, data).unwrap();
    if let Ok(mut z) = quarry::wheel::archive::WheelZip::open(&path) {
        let dest = dir.path().join("out");
        let _ = z.dist_info_dir();
        let _ = z.scan(Some(&dest), |_, _| true);
        // Nothing may land outside the destination.
        for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let n = e.file_name();
            assert!(n == "out" || n == "fuzz-1.0-py3-none-any.whl", "wrote {n:?} outside the destination");
        }
    }
});
