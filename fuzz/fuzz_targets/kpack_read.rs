//! `.kpack` archives (`code_objects::kpack`): the MessagePack table of
//! contents and the zstd frame of each kernel.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = quarry::code_objects::kpack::arches(data);
    let _ = quarry::code_objects::kpack::read(data);
    let _ = quarry::code_objects::kpack::kernel(data, "lib/libfuzz.so#0", "gfx942");
});
