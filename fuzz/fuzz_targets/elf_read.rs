//! ELF reading and verification (`elf::read_bytes`, `elf::verify_bytes`):
//! what `wheel check`, `repair` and `code-objects` read from every wheel member.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = std::path::Path::new("fuzz.so");
    if quarry::elf::read_bytes(data, p).is_ok() {
        let _ = quarry::elf::verify_bytes(data, p);
    }
});
