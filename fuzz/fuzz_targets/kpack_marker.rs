//! The `.rocm_kpack_ref` marker of a device-split host binary
//! (`code_objects::marker::read`), from any ELF object.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = object::File::parse(data) {
        let _ = quarry::code_objects::marker::read(&f);
    }
});
