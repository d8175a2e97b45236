use super::*;
use proptest::prelude::*;

fn sample(connections: usize) -> HandOff {
    HandOff {
        written_unix_ms: 1_765_000_000_000,
        writer: "0.9.0".into(),
        config: "/etc/sluice/sluice.toml".into(),
        services: vec!["web".into(), "dns-v6".into()],
        backends: vec![
            BackendRecord {
                service: 0,
                address: "192.0.2.10".parse().unwrap(),
                healthy: true,
                weight: 1,
                draining_ms: None,
                port: 0,
                mac: Some([2, 0, 0, 0, 0, 0x10]),
            },
            BackendRecord {
                service: 1,
                address: "2001:db8::10".parse().unwrap(),
                healthy: false,
                weight: 1000,
                draining_ms: Some(29_000),
                port: 1,
                mac: None,
            },
        ],
        connections: (0..connections)
            .map(|i| Connection {
                key: TrackKey {
                    src: [0, 0x0a00_0000 + i as u64],
                    dst: [0, 0xcb00_710a],
                    meta: (2 << 40) | (6 << 32) | ((i as u64 & 0xffff) << 16) | 80,
                },
                service: (i % 2) as u32,
                backend: (i % 2) as u32,
                idle_ms: i as u32,
                idle_timeout_ms: 600_000,
                half_open: i % 3 == 0,
                current_pool: i % 5 != 0,
            })
            .collect(),
    }
}

#[test]
fn a_file_reads_back_as_written() {
    let h = sample(100);
    assert_eq!(HandOff::decode(&h.encode()), Ok(h));
    let empty = HandOff::default();
    assert_eq!(HandOff::decode(&empty.encode()), Ok(empty));
}

#[test]
fn a_file_cut_anywhere_is_refused() {
    let bytes = sample(5).encode();
    for len in 0..bytes.len() {
        let r = HandOff::decode(&bytes[..len]);
        assert!(r.is_err(), "cut at {len} of {} was read", bytes.len());
    }
}

#[test]
fn any_flipped_bit_is_refused() {
    let bytes = sample(3).encode();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            assert!(HandOff::decode(&b).is_err(), "byte {i} bit {bit}");
        }
    }
}

#[test]
fn foreign_and_newer_files_are_named_as_such() {
    assert_eq!(
        HandOff::decode(b"#!/bin/sh\necho not a hand-off file\n"),
        Err(DecodeError::Foreign)
    );
    let mut b = sample(1).encode();
    b[16..20].copy_from_slice(&(VERSION + 1).to_le_bytes());
    assert_eq!(HandOff::decode(&b), Err(DecodeError::Version(VERSION + 1)));
}

/// A file whose checksum holds but whose count claims more records than
/// it has is refused before anything is allocated for them.
#[test]
fn a_count_larger_than_the_file_is_refused() {
    let mut h = sample(0).encode();
    h.truncate(h.len() - 4);
    let at = h.len() - 8;
    h[at..].copy_from_slice(&u64::MAX.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        HandOff::decode(&h),
        Err(DecodeError::Truncated("the connection count"))
    );
}

#[test]
fn indexes_out_of_range_are_refused() {
    let mut h = sample(1);
    h.connections[0].backend = 7;
    assert!(matches!(
        HandOff::decode(&h.encode()),
        Err(DecodeError::Malformed(_))
    ));
    let mut h = sample(0);
    h.backends[0].service = 2;
    assert!(matches!(
        HandOff::decode(&h.encode()),
        Err(DecodeError::Malformed(_))
    ));
}

#[test]
fn the_service_id_is_not_written_and_is_given_back_on_reading() {
    let mut h = sample(1);
    h.connections[0].key.meta |= 0x1234 << 48;
    let back = HandOff::decode(&h.encode()).unwrap();
    assert_eq!(back.connections[0].key.meta >> 48, 0);
    let k = back.connections[0].key_for(crate::ids::ServiceId(9));
    assert_eq!(k.service(), crate::ids::ServiceId(9));
    assert_eq!(
        k.meta & 0xffff_ffff_ffff,
        h.connections[0].key.meta & 0xffff_ffff_ffff
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = HandOff::decode(&bytes);
        let mut with_magic = MAGIC.to_vec();
        with_magic.extend_from_slice(&bytes);
        let _ = HandOff::decode(&with_magic);
    }

    #[test]
    fn round_trips(n in 0usize..50, stamp in any::<u64>(), writer in "[ -~]{0,40}") {
        let mut h = sample(n);
        h.written_unix_ms = stamp;
        h.writer = writer;
        prop_assert_eq!(HandOff::decode(&h.encode()), Ok(h));
    }
}
