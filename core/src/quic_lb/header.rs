//! Where a QUIC packet's Destination Connection ID is, from the version-
//! independent header fields (RFC 8999), and which long-header packets
//! carry one the server chose (QUIC versions 1 and 2).

use super::Fallback;

/// QUIC version 1 (RFC 9000).
pub(crate) const VERSION_1: u32 = 0x0000_0001;
/// QUIC version 2 (RFC 9369).
pub(crate) const VERSION_2: u32 = 0x6b33_43cf;

/// The header form bit: set for long headers.
const LONG_HEADER: u8 = 0x80;

/// The long-header packet types a version numbers differently.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum LongType {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
}

fn long_type(version: u32, first: u8) -> Option<LongType> {
    let bits = (first >> 4) & 0b11;
    match version {
        VERSION_1 => Some(match bits {
            0 => LongType::Initial,
            1 => LongType::ZeroRtt,
            2 => LongType::Handshake,
            _ => LongType::Retry,
        }),
        VERSION_2 => Some(match bits {
            1 => LongType::Initial,
            2 => LongType::ZeroRtt,
            3 => LongType::Handshake,
            _ => LongType::Retry,
        }),
        _ => None,
    }
}

/// The bytes from the Destination Connection ID's first octet on: for a
/// short header the rest of the datagram (its length is the
/// configuration's, which the first octet names), for a long header
/// exactly the ID. A packet whose ID the client chose (Initial, 0-RTT), of
/// a version this does not know, or too short to hold a header, is a
/// [`Fallback`].
#[inline]
pub(crate) fn destination_cid(payload: &[u8]) -> Result<&[u8], Fallback> {
    let Some((&first, rest)) = payload.split_first() else {
        return Err(Fallback::TooShort);
    };
    if first & LONG_HEADER == 0 {
        // A short header (the fixed bit may be greased, RFC 9287).
        return if rest.is_empty() {
            Err(Fallback::TooShort)
        } else {
            Ok(rest)
        };
    }
    let Some((version, rest)) = rest.split_first_chunk::<4>() else {
        return Err(Fallback::TooShort);
    };
    let version = u32::from_be_bytes(*version);
    let Some((&dcid_len, rest)) = rest.split_first() else {
        return Err(Fallback::TooShort);
    };
    let dcid = rest
        .get(..usize::from(dcid_len))
        .ok_or(Fallback::TooShort)?;
    match long_type(version, first) {
        Some(LongType::Handshake) => Ok(dcid),
        Some(LongType::Initial | LongType::ZeroRtt) => Err(Fallback::Initial),
        // A Retry goes from servers to clients; version negotiation (0)
        // too; any other version's types are unknown.
        Some(LongType::Retry) | None => Err(Fallback::UnknownVersion),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(first: u8, version: u32, dcid: &[u8]) -> Vec<u8> {
        let mut p = vec![first];
        p.extend_from_slice(&version.to_be_bytes());
        p.push(dcid.len() as u8);
        p.extend_from_slice(dcid);
        p.extend_from_slice(&[0, 0x44, 0x55]);
        p
    }

    #[test]
    fn short_header_connection_id_starts_after_the_first_byte() {
        assert_eq!(destination_cid(&[0x40, 1, 2, 3]), Ok(&[1u8, 2, 3][..]));
        // A greased fixed bit is still QUIC.
        assert_eq!(destination_cid(&[0x00, 9]), Ok(&[9u8][..]));
        assert_eq!(destination_cid(&[0x40]), Err(Fallback::TooShort));
        assert_eq!(destination_cid(&[]), Err(Fallback::TooShort));
    }

    /// Version 1 and 2 number their types differently: only Handshake
    /// packets carry a server-chosen ID that is routed.
    #[test]
    fn long_header_types_by_version() {
        let id = [7u8, 1, 2, 3, 4, 5, 6, 7];
        assert_eq!(destination_cid(&long(0xe0, VERSION_1, &id)), Ok(&id[..]));
        assert_eq!(destination_cid(&long(0xf0, VERSION_2, &id)), Ok(&id[..]));
        for (first, version) in [
            (0xc0, VERSION_1),
            (0xd0, VERSION_1),
            (0xd0, VERSION_2),
            (0xe0, VERSION_2),
        ] {
            assert_eq!(
                destination_cid(&long(first, version, &id)),
                Err(Fallback::Initial),
                "{first:#x} {version:#x}"
            );
        }
        assert_eq!(
            destination_cid(&long(0xe0, 0xff00_001d, &id)),
            Err(Fallback::UnknownVersion)
        );
        assert_eq!(
            destination_cid(&long(0xe0, 0, &id)),
            Err(Fallback::UnknownVersion)
        );
        assert_eq!(
            destination_cid(&long(0xf0, VERSION_1, &id)),
            Err(Fallback::UnknownVersion)
        );
        let truncated = &long(0xe0, VERSION_1, &id)[..10];
        assert_eq!(destination_cid(truncated), Err(Fallback::TooShort));
        assert_eq!(
            destination_cid(&[0xe0, 0, 0, 0, 1]),
            Err(Fallback::TooShort)
        );
    }
}
