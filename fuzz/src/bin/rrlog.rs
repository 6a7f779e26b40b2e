#![no_main]
rrc_fuzz::fuzz_binary!(rrlog);
