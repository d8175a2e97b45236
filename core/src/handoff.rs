//! The conntrack hand-off file's format: what one sluice leaves its
//! successor across a restart, with nothing process-local in it — services by name, backends by (service,
//! address), times relative to the moment it was written.
//!
//! Layout (little-endian): the magic `SLUICE-HANDOFF\0\0`, the format
//! version (u32), the wall-clock time of writing (u64, ms since the Unix
//! epoch), the writer's version (u16 length + UTF-8), the services (u32
//! count, each a u16 length + UTF-8 name), the backends (u32 count, each
//! [`BACKEND_LEN`] bytes), the connections (u64 count, each
//! [`CONNECTION_LEN`] bytes), then the CRC-32 of everything before it.
//! A decoder checks the magic, the version, the checksum, then every
//! count against the bytes that are left before it allocates, so a
//! corrupt or hostile file costs at most its own size.

use std::net::{IpAddr, Ipv6Addr};

use crate::conntrack::TrackKey;

/// First bytes of every hand-off file.
pub(crate) const MAGIC: [u8; 16] = *b"SLUICE-HANDOFF\0\0";

/// The format this build writes and reads. A newer sluice reads every
/// older version it knows; an older one refuses a newer file.
pub(crate) const VERSION: u32 = 1;

/// Bytes of one backend record: service index (u32), address (family
/// byte 4 or 6, 16 bytes), healthy (u8), weight (u16), ms of draining
/// left (u32, 0: not draining), egress port (u16), next-hop MAC (a u8
/// 0 or 1 saying whether it is known, then 6 bytes).
pub const BACKEND_LEN: usize = 4 + 1 + 16 + 1 + 2 + 4 + 2 + 1 + 6;

/// Bytes of one connection record: key addresses (4 × u64), key meta
/// without its service (u64), service index (u32), backend index (u32),
/// ms since its last packet (u32), idle timeout (u32), flags (u8).
pub const CONNECTION_LEN: usize = 32 + 8 + 4 + 4 + 4 + 4 + 1;

/// Bits of the key's `meta` that hold the (process-local) service id.
const META_SERVICE: u64 = 0xffff << 48;

/// Flag: the entry was written by a SYN and nothing else was seen since.
const HALF_OPEN: u8 = 1;
/// Flag: the entry was written under its service's pool in force at the
/// stop (its pool epoch was current).
const CURRENT_POOL: u8 = 2;

/// A backend as the writer knew it, for the entries naming it and for
/// the successor's first health verdicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendRecord {
    /// Index into [`HandOff::services`].
    pub service: u32,
    pub address: IpAddr,
    pub healthy: bool,
    /// 0–1000 (HC-7).
    pub weight: u16,
    /// Removed from the configuration and draining (CT-10): the
    /// milliseconds it had left (never 0).
    pub draining_ms: Option<u32>,
    /// Its egress: the port's index in config order and the next hop's
    /// MAC when resolved.
    pub port: u16,
    pub mac: Option<[u8; 6]>,
}

/// One conntrack entry as the writer held it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// The tracking key, its service bits zero (ids are process-local).
    pub key: TrackKey,
    /// Index into [`HandOff::services`].
    pub service: u32,
    /// Index into [`HandOff::backends`].
    pub backend: u32,
    /// Milliseconds from its last packet to the writing of the file.
    pub idle_ms: u32,
    pub idle_timeout_ms: u32,
    pub half_open: bool,
    /// Written under the pool its service had at the stop (CT-11).
    pub current_pool: bool,
}

/// Everything a hand-off file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandOff {
    /// Wall-clock time of writing, ms since the Unix epoch.
    pub written_unix_ms: u64,
    /// The writing sluice's version.
    pub writer: String,
    /// The configuration file it ran (absolute): a sluice started with
    /// another one takes nothing from the file.
    pub config: String,
    pub services: Vec<String>,
    pub backends: Vec<BackendRecord>,
    pub connections: Vec<Connection>,
}

/// Why a file's bytes are not a hand-off this sluice can read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("not a sluice hand-off file (its first bytes are not the magic)")]
    Foreign,
    #[error("format version {0}, newer than this sluice reads ({VERSION})")]
    Version(u32),
    #[error("truncated: {0} is cut off")]
    Truncated(&'static str),
    #[error("checksum mismatch (the file was damaged)")]
    Checksum,
    #[error("malformed {0}")]
    Malformed(&'static str),
}

impl Connection {
    /// The key with `service`'s id in it.
    pub fn key_for(&self, service: crate::ids::ServiceId) -> TrackKey {
        TrackKey {
            meta: (self.key.meta & !META_SERVICE) | (u64::from(service.0) << 48),
            ..self.key
        }
    }
}

impl HandOff {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            64 + self.backends.len() * BACKEND_LEN + self.connections.len() * CONNECTION_LEN,
        );
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.written_unix_ms.to_le_bytes());
        put_str(&mut out, &self.writer);
        put_str(&mut out, &self.config);
        out.extend_from_slice(&(self.services.len() as u32).to_le_bytes());
        for s in &self.services {
            put_str(&mut out, s);
        }
        out.extend_from_slice(&(self.backends.len() as u32).to_le_bytes());
        for b in &self.backends {
            put_backend(&mut out, b);
        }
        out.extend_from_slice(&(self.connections.len() as u64).to_le_bytes());
        for c in &self.connections {
            put_connection(&mut out, c);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a file's bytes; every index in the result is in range.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(bytes);
        if r.take::<16>("the magic").ok() != Some(MAGIC) {
            return Err(DecodeError::Foreign);
        }
        let version = r.u32("the version")?;
        if version > VERSION || version == 0 {
            return Err(DecodeError::Version(version));
        }
        let (body, crc) = bytes
            .split_last_chunk::<4>()
            .ok_or(DecodeError::Truncated("the checksum"))?;
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return Err(DecodeError::Checksum);
        }
        let mut r = Reader(body.get(MAGIC.len() + 4..).unwrap_or(&[]));
        let written_unix_ms = r.u64("the time of writing")?;
        let writer = r.string("the writer's version")?;
        let config = r.string("the configuration file")?;
        let services = (0..r.count(2, "the service count")?)
            .map(|_| r.string("a service name"))
            .collect::<Result<Vec<_>, _>>()?;
        let backends = (0..r.count(BACKEND_LEN, "the backend count")?)
            .map(|_| r.backend(services.len()))
            .collect::<Result<Vec<_>, _>>()?;
        let connections = (0..r.count64(CONNECTION_LEN, "the connection count")?)
            .map(|_| r.connection(services.len(), backends.len()))
            .collect::<Result<Vec<_>, _>>()?;
        if !r.0.is_empty() {
            return Err(DecodeError::Malformed(
                "ending: bytes after the connections",
            ));
        }
        Ok(Self {
            written_unix_ms,
            writer,
            config,
            services,
            backends,
            connections,
        })
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_backend(out: &mut Vec<u8>, b: &BackendRecord) {
    out.extend_from_slice(&b.service.to_le_bytes());
    let (family, octets) = match b.address {
        IpAddr::V4(a) => (4u8, a.to_ipv6_mapped().octets()),
        IpAddr::V6(a) => (6u8, a.octets()),
    };
    out.push(family);
    out.extend_from_slice(&octets);
    out.push(u8::from(b.healthy));
    out.extend_from_slice(&b.weight.to_le_bytes());
    out.extend_from_slice(&b.draining_ms.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&b.port.to_le_bytes());
    out.push(u8::from(b.mac.is_some()));
    out.extend_from_slice(&b.mac.unwrap_or_default());
}

fn put_connection(out: &mut Vec<u8>, c: &Connection) {
    for w in c.key.src.iter().chain(&c.key.dst) {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(&(c.key.meta & !META_SERVICE).to_le_bytes());
    out.extend_from_slice(&c.service.to_le_bytes());
    out.extend_from_slice(&c.backend.to_le_bytes());
    out.extend_from_slice(&c.idle_ms.to_le_bytes());
    out.extend_from_slice(&c.idle_timeout_ms.to_le_bytes());
    let flags =
        if c.half_open { HALF_OPEN } else { 0 } | if c.current_pool { CURRENT_POOL } else { 0 };
    out.push(flags);
}

/// The bytes not read yet.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(DecodeError::Truncated(what))?;
        self.0 = rest;
        Ok(*head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.take::<1>(what).map(|[b]| b)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.take(what).map(u16::from_le_bytes)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.take(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.take(what).map(u64::from_le_bytes)
    }

    /// A u32 count of records of at least `each` bytes, checked against
    /// what is left: nothing is allocated for records that are not there.
    fn count(&mut self, each: usize, what: &'static str) -> Result<usize, DecodeError> {
        let n = self.u32(what)? as usize;
        self.fits(n, each, what)
    }

    fn count64(&mut self, each: usize, what: &'static str) -> Result<usize, DecodeError> {
        let n = usize::try_from(self.u64(what)?).map_err(|_| DecodeError::Truncated(what))?;
        self.fits(n, each, what)
    }

    fn fits(&self, n: usize, each: usize, what: &'static str) -> Result<usize, DecodeError> {
        if n.checked_mul(each).is_none_or(|bytes| bytes > self.0.len()) {
            return Err(DecodeError::Truncated(what));
        }
        Ok(n)
    }

    fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let len = usize::from(self.u16(what)?);
        if len > self.0.len() {
            return Err(DecodeError::Truncated(what));
        }
        let (s, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8(s.to_vec()).map_err(|_| DecodeError::Malformed(what))
    }

    fn backend(&mut self, services: usize) -> Result<BackendRecord, DecodeError> {
        const WHAT: &str = "a backend";
        let service = self.u32(WHAT)?;
        if service as usize >= services {
            return Err(DecodeError::Malformed(
                "backend: its service index is out of range",
            ));
        }
        let family = self.u8(WHAT)?;
        let octets: [u8; 16] = self.take(WHAT)?;
        let address = match family {
            4 => IpAddr::V4(
                Ipv6Addr::from(octets)
                    .to_ipv4_mapped()
                    .ok_or(DecodeError::Malformed("backend address"))?,
            ),
            6 => IpAddr::V6(Ipv6Addr::from(octets)),
            _ => return Err(DecodeError::Malformed("backend address family")),
        };
        let healthy = match self.u8(WHAT)? {
            0 => false,
            1 => true,
            _ => return Err(DecodeError::Malformed("backend health")),
        };
        let weight = self.u16(WHAT)?;
        let draining_ms = Some(self.u32(WHAT)?).filter(|&ms| ms != 0);
        let port = self.u16(WHAT)?;
        let known = self.u8(WHAT)?;
        let mac: [u8; 6] = self.take(WHAT)?;
        let mac = match known {
            0 if mac == [0; 6] => None,
            1 => Some(mac),
            _ => return Err(DecodeError::Malformed("backend next-hop MAC")),
        };
        Ok(BackendRecord {
            service,
            address,
            healthy,
            weight,
            draining_ms,
            port,
            mac,
        })
    }

    fn connection(&mut self, services: usize, backends: usize) -> Result<Connection, DecodeError> {
        const WHAT: &str = "a connection";
        let mut words = [0u64; 5];
        for w in &mut words {
            *w = self.u64(WHAT)?;
        }
        let [s0, s1, d0, d1, meta] = words;
        if meta & META_SERVICE != 0 {
            return Err(DecodeError::Malformed("connection key"));
        }
        let service = self.u32(WHAT)?;
        let backend = self.u32(WHAT)?;
        if service as usize >= services || backend as usize >= backends {
            return Err(DecodeError::Malformed(
                "connection: an index is out of range",
            ));
        }
        let idle_ms = self.u32(WHAT)?;
        let idle_timeout_ms = self.u32(WHAT)?;
        let flags = self.u8(WHAT)?;
        if flags & !(HALF_OPEN | CURRENT_POOL) != 0 {
            return Err(DecodeError::Malformed("connection flags"));
        }
        Ok(Connection {
            key: TrackKey {
                src: [s0, s1],
                dst: [d0, d1],
                meta,
            },
            service,
            backend,
            idle_ms,
            idle_timeout_ms,
            half_open: flags & HALF_OPEN != 0,
            current_pool: flags & CURRENT_POOL != 0,
        })
    }
}

#[cfg(test)]
mod tests;
