//! The conntrack hand-off file's decoder on arbitrary bytes: it never
//! panics or allocates beyond the input, every index it returns is in
//! range, and what it accepts encodes back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::handoff::HandOff;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = HandOff::decode(data) else {
        return;
    };
    for b in &h.backends {
        assert!((b.service as usize) < h.services.len());
    }
    for c in &h.connections {
        assert!((c.service as usize) < h.services.len());
        assert!((c.backend as usize) < h.backends.len());
    }
    assert_eq!(h.encode(), data, "decode then encode is the identity");
});
