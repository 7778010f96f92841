//! The deflate walker that indexes a zip member's stream at its block
//! boundaries (`zip::inflate_index::IndexedInflate`), fed any raw stream.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Read;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let crc = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stream");
    std::fs::write(&path, &data[4..]).unwrap();
    let len = (data.len() - 4) as u64;
    if let Ok(mut r) = quarry::zip::inflate_index::IndexedInflate::open(&path, 0, len, len * 8, crc) {
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        // Bounded: a stream expands at most 1032:1.
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 || total > len * 1100 + (1 << 20) {
                break;
            }
            total += n as u64;
        }
        let _ = r.into_index();
    }
});
