#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tiervisor_fuzz::trace(data));
