//! QUIC-LB connection IDs on arbitrary bytes: the decoder never panics,
//! routes only to server IDs its configuration holds, and decodes every
//! connection ID the encoder writes back to its server ID, at every
//! length the draft allows, encrypted or not.
//!
//! Input: a configuration byte (bits 0–3: the server ID length less one,
//! bit 4: a key, bits 5–7: the config id), a nonce-length byte, then bytes
//! that serve as the server ID, the nonce and the UDP payload decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::ids::BackendId;
use sluice_core::quic_lb::cid::{server_id_value, CidCodec, CidLengths};
use sluice_core::quic_lb::{ConfigRoute, Decision, QuicLbRouting, Server};

const KEY: [u8; 16] = *b"sluice-fuzz-key!";

fuzz_target!(|data: &[u8]| {
    let [cfg, nonce_len, rest @ ..] = data else {
        return;
    };
    let config_id = (cfg >> 5).min(6);
    let sid_len = (cfg & 0x0f) + 1;
    let nonce_len = 4 + nonce_len % 15;
    let Ok(lengths) = CidLengths::new(config_id, sid_len, nonce_len) else {
        return;
    };
    let key = (cfg & 0x10 != 0).then_some(KEY);
    let codec = CidCodec::new(lengths, key);
    let (sid, nonce) = (usize::from(sid_len), usize::from(nonce_len));
    if let (Some(server_id), Some(nonce_bytes)) = (rest.get(..sid), rest.get(sid..sid + nonce)) {
        let cid = codec
            .encode(rest.len() as u8, server_id, nonce_bytes)
            .expect("lengths match the configuration");
        assert_eq!(cid.as_bytes().len(), lengths.cid_len());
        assert_eq!(cid.as_bytes()[0] >> 5, config_id);
        assert_eq!(
            codec.server_id(cid.as_bytes()),
            Some(server_id_value(server_id))
        );
    }
    // The decoder on the input as a UDP payload, with the server ID above
    // (when there is one) as the only server of the configuration.
    let mut routing = QuicLbRouting::default();
    let known = rest.get(..sid).map(server_id_value);
    let servers = known
        .map(|id| {
            let server = Server {
                backend: BackendId(7),
                inactive_pool: false,
            };
            (id, server)
        })
        .into_iter()
        .collect();
    routing.configs[usize::from(config_id)] = Some(ConfigRoute {
        codec: codec.clone(),
        servers,
    });
    let decoded = routing.decode(rest);
    assert_eq!(decoded.decision, routing.route(rest));
    if let Decision::Routed(server) = decoded.decision {
        assert_eq!(server.backend, BackendId(7));
        assert_eq!(decoded.config_id, Some(config_id));
        assert_eq!(decoded.server_id, known);
    }
});
