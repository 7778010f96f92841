//! Foreign archives read into a layer tree (`layer::archive::read_into`):
//! tar (also gz, xz, zstd) and zip, as `archive` sources and bases give them.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, data).unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let mut tree = quarry::layer::Tree::default();
    let place = quarry::layer::archive::Placement {
        dest: b"opt/x".to_vec(),
        strip_components: 0,
        map: vec![],
        owner: None,
        allow_devices: false,
        record_order: true,
        verified: false,
    };
    let _ = quarry::layer::archive::read_into(&path, &mut tree, &place, &spool);
});
