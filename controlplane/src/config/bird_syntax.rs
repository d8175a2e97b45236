//! What BIRD 2's configuration syntax can carry: the symbols sluice's
//! rendered configuration defines (its own, and one protocol per
//! `[[bgp.peer]]`) and the strings it writes. Validation refuses what
//! would not fit (`bgp.rs`); the renderer (`crate::announce::bird`) takes
//! the names from here, so both follow one rule.

/// The longest symbol BIRD 2 accepts (`SYM_MAX_LEN`; a longer one is a
/// parse error, "Symbol too long").
pub const SYMBOL_MAX: usize = 64;

/// The BIRD table holding the IPv4 VIP routes (and its kernel protocol's
/// name, [`KERNEL4`]).
pub const VIPS4: &str = "sluice_vips4";
/// The BIRD table holding the IPv6 VIP routes.
pub const VIPS6: &str = "sluice_vips6";
/// The kernel protocol learning the IPv4 VIP routes.
pub const KERNEL4: &str = "sluice_kernel4";
/// The kernel protocol learning the IPv6 VIP routes.
pub const KERNEL6: &str = "sluice_kernel6";
/// The BFD protocol.
pub const BFD: &str = "sluice_bfd";
/// The export filter attaching each VIP's communities and MED.
pub const ANNOUNCE: &str = "sluice_announce";

/// The symbols the rendered configuration defines besides the peers'
/// protocols.
const FIXED_SYMBOLS: [&str; 6] = [VIPS4, VIPS6, KERNEL4, KERNEL6, BFD, ANNOUNCE];

/// Characters of a `*_name` hash suffix: `_` and 8 hex digits.
const HASH_SUFFIX: usize = 9;

/// The BIRD protocol name of a peer: `sluice_` and the peer's name with
/// hyphens as underscores (`[[bgp.peer]]` names are RFC 1035 labels, which
/// hold no underscore, so distinct names stay distinct). A name that would
/// exceed [`SYMBOL_MAX`] or take one of the configuration's own symbols
/// (`sluice_bfd` for a peer named "bfd") is cut to fit and ends in `_` and
/// a hash of the whole name instead, e.g. `sluice_tor_a_2f1c09e4`: still
/// recognisable, stable across renders (a renamed protocol restarts its
/// session on `birdc configure`), and distinct from every other peer's
/// name unless two hashes collide, which validation refuses.
pub fn protocol_name(peer: &str) -> String {
    let plain = format!("sluice_{}", peer.replace('-', "_"));
    if plain.len() <= SYMBOL_MAX && !FIXED_SYMBOLS.contains(&plain.as_str()) {
        return plain;
    }
    // The name is ASCII (a label): any byte offset is a char boundary.
    let keep = plain.len().min(SYMBOL_MAX - HASH_SUFFIX);
    let cut = plain[..keep].trim_end_matches('_');
    format!("{cut}_{:08x}", fnv1a(peer.as_bytes()) as u32)
}

/// 64-bit FNV-1a: a hash that, unlike std's, stays the same across Rust
/// releases, so a peer keeps its protocol name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether BIRD 2's string syntax holds `s` as it is (AP-6). A BIRD 2.0
/// string is every byte between two double quotes, without escapes: it
/// cannot hold `"` or a newline at all, and a NUL in it silently ends the
/// value BIRD uses. A backslash is taken literally, but reads as an escape
/// to anyone (or any tool) used to C-like strings, so it is refused rather
/// than left ambiguous; other control characters would reach the kernel
/// as key bytes no router's configuration can be typed to match.
pub fn fits_bird_string(s: &str) -> bool {
    !s.chars().any(|c| c == '"' || c == '\\' || c.is_control())
}
