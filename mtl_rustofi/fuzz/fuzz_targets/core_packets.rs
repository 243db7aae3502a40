#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mtl_rustofi::fuzzing::core_packets(data));
