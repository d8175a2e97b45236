//! QUIC-LB connection IDs (draft-ietf-quic-load-balancers): the lengths a
//! configuration may have, and the server ID's encoding in a connection
//! ID — in the clear, by one AES-128 block (server ID and nonce of 16
//! bytes together), or by the four-pass Feistel network over AES-128
//! (any other length). The load balancer decodes; the encoder is what a
//! server does, for tests, the fuzz target and the live test's servers.
//!
//! Nothing here allocates: every buffer is an array on the stack.

use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use aes::Aes128;

/// The most server-ID and nonce bytes one connection ID holds (QUIC v1
/// limits connection IDs to 20 bytes; the first octet takes one).
pub const MAX_PLAINTEXT: usize = 19;
/// The longest server ID: 19 bytes less the shortest nonce.
pub const MAX_SERVER_ID: usize = MAX_PLAINTEXT - MIN_NONCE;
/// The shortest nonce the draft allows.
pub const MIN_NONCE: usize = 4;
/// Config rotation bits that mark a connection ID as unroutable (servers
/// without a configuration use it); no configuration may take it.
pub const UNROUTABLE_CONFIG: u8 = 0b111;
/// The config ids a configuration may take: 0 to 6.
pub const CONFIG_IDS: usize = 7;
/// The length of the single-pass case: server ID and nonce fill one AES
/// block.
const SINGLE_PASS: usize = 16;

/// A server ID: at most [`MAX_SERVER_ID`] bytes, held as their big-endian
/// value (the length is the configuration's, so equal values are equal
/// IDs).
pub type ServerId = u128;

/// Why a configuration's lengths or key are refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CidConfigError {
    #[error("config_id {0} is out of range: use 0 to 6 (7, binary 111, marks unroutable connection IDs)")]
    ConfigId(u8),
    #[error("server_id_length {0} is out of range: use 1 to 15 bytes")]
    ServerIdLength(u8),
    #[error("nonce_length {0} is too short: use at least 4 bytes")]
    NonceLength(u8),
    #[error("server_id_length {0} and nonce_length {1} add up to {sum} bytes: at most 19 fit in a QUIC connection ID with its first octet", sum = *.0 as u16 + *.1 as u16)]
    TooLong(u8, u8),
}

/// The lengths of one QUIC-LB configuration.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CidLengths {
    /// The config rotation bits (0–6).
    pub config_id: u8,
    /// Server ID bytes.
    pub server_id: u8,
    /// Nonce bytes.
    pub nonce: u8,
}

impl CidLengths {
    /// The lengths, checked against the draft's limits.
    pub fn new(config_id: u8, server_id: u8, nonce: u8) -> Result<Self, CidConfigError> {
        if usize::from(config_id) >= CONFIG_IDS {
            return Err(CidConfigError::ConfigId(config_id));
        }
        if server_id == 0 || usize::from(server_id) > MAX_SERVER_ID {
            return Err(CidConfigError::ServerIdLength(server_id));
        }
        if usize::from(nonce) < MIN_NONCE {
            return Err(CidConfigError::NonceLength(nonce));
        }
        if usize::from(server_id) + usize::from(nonce) > MAX_PLAINTEXT {
            return Err(CidConfigError::TooLong(server_id, nonce));
        }
        Ok(Self {
            config_id,
            server_id,
            nonce,
        })
    }

    /// Server ID and nonce bytes together.
    #[inline]
    pub fn plaintext(&self) -> usize {
        usize::from(self.server_id) + usize::from(self.nonce)
    }

    /// The connection ID's length: the first octet, server ID and nonce
    /// (a server may append bytes of its own, which the decoder ignores).
    #[inline]
    pub fn cid_len(&self) -> usize {
        1 + self.plaintext()
    }
}

/// One configuration's codec: its lengths and, when it has a key, the
/// expanded AES-128 key.
#[derive(Clone)]
pub struct CidCodec {
    lengths: CidLengths,
    cipher: Option<Aes128>,
}

impl std::fmt::Debug for CidCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CidCodec")
            .field("lengths", &self.lengths)
            .field("encrypted", &self.cipher.is_some())
            .finish()
    }
}

impl CidCodec {
    /// The codec of `lengths`, encrypted when `key` is given.
    pub fn new(lengths: CidLengths, key: Option<[u8; 16]>) -> Self {
        Self {
            lengths,
            cipher: key.map(|k| Aes128::new(&k.into())),
        }
    }

    #[inline]
    pub fn lengths(&self) -> CidLengths {
        self.lengths
    }

    /// Whether the configuration has a key.
    pub fn encrypted(&self) -> bool {
        self.cipher.is_some()
    }

    /// The server ID a connection ID of this configuration carries. None
    /// when `cid` is shorter than the configuration's connection IDs (the
    /// config rotation bits are the caller's to check).
    #[inline]
    pub fn server_id(&self, cid: &[u8]) -> Option<ServerId> {
        let len = self.lengths.plaintext();
        let body = cid.get(1..1 + len)?;
        let sid = usize::from(self.lengths.server_id);
        let mut plain = [0u8; MAX_PLAINTEXT];
        let plain = &mut plain[..len];
        match &self.cipher {
            None => plain.copy_from_slice(body),
            Some(aes) if len == SINGLE_PASS => {
                let mut block = [0u8; 16];
                block.copy_from_slice(body);
                let mut b = block.into();
                aes.decrypt_block(&mut b);
                plain.copy_from_slice(&b);
            }
            Some(aes) => four_pass_decrypt(aes, body, plain, sid),
        }
        Some(server_id_value(&plain[..sid]))
    }

    /// A connection ID of this configuration (what a server issues):
    /// `first_octet`'s low five bits (length self-description or random
    /// bits) under the config rotation bits, then the server ID and nonce,
    /// encrypted when the configuration has a key. None when either has
    /// the wrong length.
    pub fn encode(&self, first_octet_low: u8, server_id: &[u8], nonce: &[u8]) -> Option<Cid> {
        let l = self.lengths;
        if server_id.len() != usize::from(l.server_id) || nonce.len() != usize::from(l.nonce) {
            return None;
        }
        let len = l.plaintext();
        let mut cid = Cid {
            bytes: [0; 1 + MAX_PLAINTEXT],
            len: 1 + len,
        };
        cid.bytes[0] = (l.config_id << 5) | (first_octet_low & 0x1f);
        let mut plain = [0u8; MAX_PLAINTEXT];
        plain[..server_id.len()].copy_from_slice(server_id);
        plain[server_id.len()..len].copy_from_slice(nonce);
        let out = &mut cid.bytes[1..1 + len];
        match &self.cipher {
            None => out.copy_from_slice(&plain[..len]),
            Some(aes) if len == SINGLE_PASS => {
                let mut block = [0u8; 16];
                block.copy_from_slice(&plain[..16]);
                let mut b = block.into();
                aes.encrypt_block(&mut b);
                out.copy_from_slice(&b);
            }
            Some(aes) => four_pass_encrypt(aes, &plain[..len], out),
        }
        Some(cid)
    }
}

/// A connection ID built by [`CidCodec::encode`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Cid {
    bytes: [u8; 1 + MAX_PLAINTEXT],
    len: usize,
}

impl Cid {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The value of server ID bytes (big-endian).
#[inline]
pub fn server_id_value(bytes: &[u8]) -> ServerId {
    bytes
        .iter()
        .fold(0u128, |acc, &b| (acc << 8) | ServerId::from(b))
}

/// The halves of the four-pass network: `half` bytes each; for an odd
/// length the middle byte's high nibble belongs to the left half and its
/// low nibble to the right one.
#[derive(Copy, Clone)]
struct Halves {
    left: [u8; 10],
    right: [u8; 10],
    half: usize,
    odd: bool,
    len: usize,
}

impl Halves {
    fn split(bytes: &[u8]) -> Self {
        let len = bytes.len();
        let half = len.div_ceil(2);
        let odd = len % 2 == 1;
        let mut h = Halves {
            left: [0; 10],
            right: [0; 10],
            half,
            odd,
            len,
        };
        h.left[..half].copy_from_slice(&bytes[..half]);
        h.right[..half].copy_from_slice(&bytes[len - half..]);
        h.clear_left();
        h.clear_right();
        h
    }

    fn clear_left(&mut self) {
        if self.odd {
            self.left[self.half - 1] &= 0xf0;
        }
    }

    fn clear_right(&mut self) {
        if self.odd {
            self.right[0] &= 0x0f;
        }
    }

    /// The halves joined back into `out` (`len` bytes).
    fn join(&self, out: &mut [u8]) {
        let half = self.half;
        out[..half].copy_from_slice(&self.left[..half]);
        if self.odd {
            out[half - 1] |= self.right[0];
            out[half..self.len].copy_from_slice(&self.right[1..half]);
        } else {
            out[half..self.len].copy_from_slice(&self.right[..half]);
        }
    }
}

/// One round: AES of `expand(len, pass, input)`, its first `half` bytes
/// XORed into `target`.
fn round(aes: &Aes128, len: usize, pass: u8, input: &[u8; 10], target: &mut [u8; 10], half: usize) {
    let mut block = [0u8; 16];
    block[..half].copy_from_slice(&input[..half]);
    // `len` is at most 19: it fits the octet.
    block[14] = len as u8;
    block[15] = pass;
    let mut b = block.into();
    aes.encrypt_block(&mut b);
    for (t, k) in target[..half].iter_mut().zip(b.iter()) {
        *t ^= k;
    }
}

fn four_pass_encrypt(aes: &Aes128, plain: &[u8], out: &mut [u8]) {
    let mut h = Halves::split(plain);
    let (len, half) = (h.len, h.half);
    round(aes, len, 1, &h.left, &mut h.right, half);
    h.clear_right();
    round(aes, len, 2, &h.right, &mut h.left, half);
    h.clear_left();
    round(aes, len, 3, &h.left, &mut h.right, half);
    h.clear_right();
    round(aes, len, 4, &h.right, &mut h.left, half);
    h.clear_left();
    h.join(out);
}

/// The four passes backwards, stopping after three when the server ID
/// (`sid` bytes) lies in the left half's whole bytes.
fn four_pass_decrypt(aes: &Aes128, cipher: &[u8], plain: &mut [u8], sid: usize) {
    let mut h = Halves::split(cipher);
    let (len, half) = (h.len, h.half);
    round(aes, len, 4, &h.right, &mut h.left, half);
    h.clear_left();
    round(aes, len, 3, &h.left, &mut h.right, half);
    h.clear_right();
    round(aes, len, 2, &h.right, &mut h.left, half);
    h.clear_left();
    if sid > len / 2 {
        round(aes, len, 1, &h.left, &mut h.right, half);
        h.clear_right();
    }
    h.join(plain);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const VECTOR_KEY: &str = "8f95f09245765f80256934e50c66207f";

    fn key(s: &str) -> [u8; 16] {
        hex(s).try_into().unwrap()
    }

    /// Encodes `sid` and `nonce` under config `cr` (with the length
    /// self-described, as every vector is), checks the connection ID
    /// against `cid` and decodes it back.
    fn vector(cr: u8, sid: &str, nonce: &str, cid: &str, key: Option<[u8; 16]>) {
        let (sid, nonce) = (hex(sid), hex(nonce));
        let lengths = CidLengths::new(cr, sid.len() as u8, nonce.len() as u8).unwrap();
        let codec = CidCodec::new(lengths, key);
        let encoded = codec
            .encode(lengths.plaintext() as u8, &sid, &nonce)
            .unwrap();
        assert_eq!(encoded.as_bytes(), hex(cid).as_slice(), "encode {sid:x?}");
        assert_eq!(
            codec.server_id(&hex(cid)),
            Some(server_id_value(&sid)),
            "decode {cid}"
        );
    }

    /// The draft's unencrypted vectors. Its second one is misprinted (a
    /// nine-digit nonce, and a connection ID whose first octet is not
    /// config 1 with length 10); it is checked as the draft's other
    /// readers repaired it: nonce 3487d9700b, first octet 0x2a.
    #[test]
    fn unencrypted_test_vectors() {
        vector(0, "c4605e", "4504cc4f", "07c4605e4504cc4f", None);
        vector(
            1,
            "350d28b420",
            "3487d9700b",
            "2a350d28b4203487d9700b",
            None,
        );
    }

    /// The draft's encrypted vectors: the four-pass network with an odd
    /// length (7), with server ID longer than the nonce (a fourth
    /// decryption pass), even lengths, and the single-pass case (16).
    #[test]
    fn encrypted_test_vectors() {
        let k = Some(key(VECTOR_KEY));
        vector(0, "ed793a", "ee080dbf", "0720b1d07b359d3c", k);
        vector(
            1,
            "ed793a51d49b8f5fab65",
            "ee080dbf48",
            "2fcc381bc74cb4fbad2823a3d1f8fed2",
            k,
        );
        vector(
            2,
            "ed793a51d49b8f5f",
            "ee080dbf48c0d1e5",
            "504dd2d05a7b0de9b2b9907afb5ecf8cc3",
            k,
        );
        // Printed with first octet 0x12 (config 0, length 18), against
        // its own config 3: the first octet is (3 << 5) | 18 = 0x72. Every
        // encrypted byte is the draft's.
        vector(
            3,
            "ed793a51d49b8f5fab",
            "ee080dbf48c0d1e55d",
            "725779c9cc86beb3a3a4a3ca96fce4bfe0cdbc",
            k,
        );
        let printed = hex("125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc");
        let codec = CidCodec::new(CidLengths::new(3, 9, 9).unwrap(), k);
        assert_eq!(
            codec.server_id(&printed),
            Some(server_id_value(&hex("ed793a51d49b8f5fab")))
        );
    }

    /// The draft's worked example of the four-pass encryption.
    #[test]
    fn four_pass_encryption_example() {
        vector(
            0,
            "31441a",
            "9c69c275",
            "0767947d29be054a",
            Some(key("fdf726a9893ec05c0632d3956680baf0")),
        );
    }

    /// Every length the draft allows, encrypted and not, odd and even:
    /// the decoder finds the server ID the encoder wrote, and a connection
    /// ID one byte short decodes to nothing.
    #[test]
    fn every_length_round_trips() {
        for sid_len in 1..=15u8 {
            for nonce_len in 4..=(19 - sid_len) {
                for key in [None, Some(key(VECTOR_KEY))] {
                    let lengths = CidLengths::new(6, sid_len, nonce_len).unwrap();
                    let codec = CidCodec::new(lengths, key);
                    let sid: Vec<u8> = (0..sid_len).map(|i| 0xa0 ^ i.wrapping_mul(37)).collect();
                    let nonce: Vec<u8> =
                        (0..nonce_len).map(|i| i.wrapping_mul(91) ^ 0x5c).collect();
                    let cid = codec.encode(0x1f, &sid, &nonce).unwrap();
                    assert_eq!(cid.as_bytes()[0], 0xdf);
                    assert_eq!(codec.server_id(cid.as_bytes()), Some(server_id_value(&sid)));
                    let short = &cid.as_bytes()[..cid.as_bytes().len() - 1];
                    assert_eq!(codec.server_id(short), None);
                    if key.is_some() {
                        assert_ne!(&cid.as_bytes()[1..1 + sid.len()], sid.as_slice());
                    }
                }
            }
        }
    }

    #[test]
    fn lengths_the_draft_refuses() {
        assert_eq!(CidLengths::new(7, 3, 4), Err(CidConfigError::ConfigId(7)));
        assert_eq!(
            CidLengths::new(0, 0, 4),
            Err(CidConfigError::ServerIdLength(0))
        );
        assert_eq!(
            CidLengths::new(0, 16, 4),
            Err(CidConfigError::ServerIdLength(16))
        );
        assert_eq!(
            CidLengths::new(0, 3, 3),
            Err(CidConfigError::NonceLength(3))
        );
        assert_eq!(
            CidLengths::new(0, 10, 10),
            Err(CidConfigError::TooLong(10, 10))
        );
        assert!(CidLengths::new(6, 15, 4).is_ok());
    }
}
