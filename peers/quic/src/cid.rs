//! The connection IDs a server issues: QUIC-LB ones built with
//! `sluice_core::quic_lb::cid`, so a load balancer routes every packet of
//! a connection to this server by its server ID whatever the client's
//! address, through quinn's `ConnectionIdGenerator`.
//!
//! The active configuration is shared by every generator of an endpoint
//! and can be switched while connections run (config rotation): IDs
//! issued after the switch carry the new config id, and with a connection
//! ID lifetime quinn retires the older ones on its own.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use quinn::{ConnectionId, ConnectionIdGenerator};
use sluice_core::quic_lb::cid::{CidCodec, CidLengths, MAX_PLAINTEXT};

/// One QUIC-LB configuration as a server holds it: the codec and this
/// server's ID under it.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    codec: CidCodec,
    server_id: Vec<u8>,
}

impl ServerConfig {
    /// The configuration, refused when the server ID's length is not the
    /// configuration's.
    pub fn new(
        lengths: CidLengths,
        server_id: Vec<u8>,
        key: Option<[u8; 16]>,
    ) -> Result<Self, String> {
        if server_id.len() != usize::from(lengths.server_id) {
            return Err(format!(
                "the server ID has {} bytes, the configuration's server_id_length is {}",
                server_id.len(),
                lengths.server_id
            ));
        }
        Ok(Self {
            codec: CidCodec::new(lengths, key),
            server_id,
        })
    }

    /// A new connection ID: this server's ID and a random nonce, the
    /// first octet's low five bits the self-described length (the bytes
    /// after the first octet).
    pub fn issue(&self) -> ConnectionId {
        let lengths = self.codec.lengths();
        let mut nonce = [0u8; MAX_PLAINTEXT];
        let nonce = &mut nonce[..usize::from(lengths.nonce)];
        rand::fill(nonce);
        // `plaintext()` is at most 19: it fits the five bits.
        let low = lengths.plaintext() as u8;
        let cid = self
            .codec
            .encode(low, &self.server_id, nonce)
            .expect("server ID and nonce lengths are the configuration's (checked in new)");
        ConnectionId::new(cid.as_bytes())
    }

    pub fn cid_len(&self) -> usize {
        self.codec.lengths().cid_len()
    }
}

/// The configuration a server issues IDs under, shared by its endpoint's
/// generators and whoever switches it.
#[derive(Clone, Debug)]
pub struct Active(Arc<Mutex<ServerConfig>>);

impl Active {
    pub fn new(config: ServerConfig) -> Self {
        Self(Arc::new(Mutex::new(config)))
    }

    /// Issue the next IDs under `config`. Its connection IDs must have the
    /// length of the current one's: quinn reads the length of short
    /// headers' IDs from the generator once.
    pub fn switch(&self, config: ServerConfig) -> Result<(), String> {
        let mut current = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if config.cid_len() != current.cid_len() {
            return Err(format!(
                "connection IDs of {} bytes cannot replace those of {}",
                config.cid_len(),
                current.cid_len()
            ));
        }
        *current = config;
        Ok(())
    }

    fn get(&self) -> ServerConfig {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A generator for quinn's `EndpointConfig::cid_generator` factory.
    pub fn generator(&self, lifetime: Option<Duration>) -> QuicLbGenerator {
        QuicLbGenerator {
            cid_len: self.get().cid_len(),
            active: self.clone(),
            lifetime,
        }
    }
}

/// quinn's connection ID generator over the active QUIC-LB configuration.
#[derive(Debug)]
pub struct QuicLbGenerator {
    active: Active,
    cid_len: usize,
    lifetime: Option<Duration>,
}

impl ConnectionIdGenerator for QuicLbGenerator {
    fn generate_cid(&mut self) -> ConnectionId {
        self.active.get().issue()
    }

    fn cid_len(&self) -> usize {
        self.cid_len
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        self.lifetime
    }
}

/// Bytes from hex digits (whitespace and colons allowed between them).
pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b':')
        .collect();
    if digits.is_empty() || !digits.len().is_multiple_of(2) {
        return Err(format!("{text:?}: expected an even number of hex digits"));
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("{text:?}: not hex"))
        })
        .collect()
}

/// An AES-128 key from 32 hex digits.
pub fn parse_key(text: &str) -> Result<[u8; 16], String> {
    parse_hex(text)?
        .try_into()
        .map_err(|v: Vec<u8>| format!("a key has 16 bytes (32 hex digits), not {}", v.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::quic_lb::cid::server_id_value;

    const KEY: &str = "8f95f09245765f80256934e50c66207f";

    fn config(config_id: u8, sid: &[u8], nonce: u8, key: Option<&str>) -> ServerConfig {
        let lengths = CidLengths::new(config_id, sid.len() as u8, nonce).unwrap();
        let key = key.map(|k| parse_key(k).unwrap());
        ServerConfig::new(lengths, sid.to_vec(), key).unwrap()
    }

    /// The IDs a generator issues decode, with the load balancer's codec
    /// (a separate one, built from the configuration alone), to the
    /// server's ID, for plaintext, single-pass and four-pass configs.
    #[test]
    fn issued_ids_decode_to_the_server_id() {
        let cases: &[(u8, &[u8], u8, Option<&str>)] = &[
            (0, &[0x0a, 0x0b, 0x01], 6, None),
            (1, &[0x0a, 0x0b, 0x02], 6, Some(KEY)),
            (2, &[0x11, 0x22, 0x33, 0x44, 0x55], 11, Some(KEY)),
            (6, &[0xff], 4, Some(KEY)),
        ];
        for &(config_id, sid, nonce, key) in cases {
            let active = Active::new(config(config_id, sid, nonce, key));
            let mut generator = active.generator(None);
            let lengths = CidLengths::new(config_id, sid.len() as u8, nonce).unwrap();
            let lb = CidCodec::new(lengths, key.map(|k| parse_key(k).unwrap()));
            let mut seen = std::collections::HashSet::new();
            for _ in 0..100 {
                let cid = generator.generate_cid();
                assert_eq!(cid.len(), generator.cid_len());
                assert_eq!(cid.len(), lengths.cid_len());
                assert_eq!(cid[0] >> 5, config_id, "config rotation bits");
                assert_eq!(
                    usize::from(cid[0] & 0x1f),
                    lengths.plaintext(),
                    "self-described length"
                );
                assert_eq!(lb.server_id(&cid), Some(server_id_value(sid)));
                seen.insert(cid.to_vec());
            }
            assert_eq!(seen.len(), 100, "every ID is new (random nonces)");
        }
    }

    /// An encrypted configuration hides the server ID: the bytes after the
    /// first octet are not the server ID, and a wrong key decodes another.
    #[test]
    fn encrypted_ids_need_the_key() {
        let sid = [0x0a, 0x0b, 0x03];
        let mut generator = Active::new(config(0, &sid, 6, Some(KEY))).generator(None);
        let lengths = CidLengths::new(0, 3, 6).unwrap();
        let wrong = CidCodec::new(lengths, Some([7; 16]));
        let mut hidden = 0;
        for _ in 0..50 {
            let cid = generator.generate_cid();
            if cid[1..4] != sid {
                hidden += 1;
            }
            assert_ne!(wrong.server_id(&cid), Some(server_id_value(&sid)));
        }
        assert!(hidden >= 49, "server ID visible in {} of 50", 50 - hidden);
    }

    /// After a switch, new IDs carry the new config id and still decode to
    /// the server ID under the new configuration; a switch to other
    /// lengths is refused.
    #[test]
    fn switching_configs_changes_the_config_id() {
        let sid = [0x0a, 0x0b, 0x04];
        let active = Active::new(config(0, &sid, 6, None));
        let mut generator = active.generator(Some(Duration::from_secs(1)));
        assert_eq!(generator.generate_cid()[0] >> 5, 0);
        active.switch(config(1, &sid, 6, Some(KEY))).unwrap();
        let cid = generator.generate_cid();
        assert_eq!(cid[0] >> 5, 1);
        let lb = CidCodec::new(
            CidLengths::new(1, 3, 6).unwrap(),
            Some(parse_key(KEY).unwrap()),
        );
        assert_eq!(lb.server_id(&cid), Some(server_id_value(&sid)));
        assert_eq!(generator.cid_lifetime(), Some(Duration::from_secs(1)));
        assert!(active.switch(config(2, &sid, 7, None)).is_err());
        assert_eq!(generator.generate_cid()[0] >> 5, 1);
    }

    #[test]
    fn server_id_of_the_wrong_length_is_refused() {
        let lengths = CidLengths::new(0, 3, 6).unwrap();
        assert!(ServerConfig::new(lengths, vec![1, 2], None).is_err());
    }

    #[test]
    fn hex() {
        assert_eq!(parse_hex("0a0b01").unwrap(), vec![0x0a, 0x0b, 0x01]);
        assert_eq!(parse_hex("0A:0b 01").unwrap(), vec![0x0a, 0x0b, 0x01]);
        assert!(parse_hex("0a0").is_err());
        assert!(parse_hex("zz").is_err());
        assert!(parse_hex("").is_err());
        assert!(parse_key("00").is_err());
        assert_eq!(parse_key(KEY).unwrap()[0], 0x8f);
    }
}
