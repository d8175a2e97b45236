//! The frame parser on arbitrary bytes: must never panic, and whatever it
//! reports must lie inside the frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::wire::{parse, Parsed};

fuzz_target!(|data: &[u8]| {
    if let Ok(Parsed::Ip(ip)) = parse(data) {
        assert!(ip.l3_offset + ip.ip_len <= data.len());
        assert!(ip.l4_offset <= ip.l3_offset + ip.ip_len);
        // HA-4: the quote reader on whatever follows the L4 offset.
        if let Some(msg) = data.get(ip.l4_offset..) {
            let _ = sluice_core::wire::icmp::quoted(msg, ip.ethertype == 0x86dd);
        }
    }
});
