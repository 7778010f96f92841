//! Clang offload bundles, plain and compressed (`CCOB`), and the target
//! scan of any file (`code_objects::inspect_bytes`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = data;
    let _ = quarry::code_objects::bundle::read(&mut r, Some(data.len() as u64));
    let _ = quarry::code_objects::compressed::read(data);
    let _ = quarry::code_objects::inspect_bytes("fuzz.hsaco", data, true);
});
