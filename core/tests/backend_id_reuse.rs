//! A backend index given to another backend (a new generation of the id)
//! never inherits the connections recorded for the old one (CT-7, CT-10):
//! the entry's id no longer matches any backend of the snapshot, so the
//! packet is re-selected by the table, through the real shard and
//! `conntrack::select`.

mod conntrack_support;

use conntrack_support::*;
use sluice_core::affinity::SessionAffinity as A;
use sluice_core::backend::BackendState;
use sluice_core::ids::BackendId;
use sluice_core::maglev_table::MaglevTable;
use sluice_core::service::{PersistenceOnUnhealthy as P, TrackingMode as M};

fn only(id: BackendId) -> std::sync::Arc<MaglevTable> {
    MaglevTable {
        slots: vec![id; 13].into(),
    }
    .into()
}

/// CT-7/CT-10 with id reuse: a flow recorded on index 1 generation 0 is
/// not sent to the backend that now holds index 1 at generation 1; a flow
/// recorded on a backend that stayed keeps it.
#[test]
fn ct_7_an_entry_of_a_reused_index_is_reselected_not_inherited() {
    let mut w = World::new(3, A::None, M::PerConnection, P::DefaultForProtocol);
    let old = BackendId(1);
    let reused = BackendId::new(1, 1);

    // What the table will look like after the reuse: pick a client whose
    // choice then is not the new holder of index 1.
    *w.backend(1) = BackendState {
        id: reused,
        address: ip("10.1.0.99"),
        ..w.backend(1).clone()
    };
    w.svc().backends[1] = reused;
    w.rebuild();
    let after = w.svc().tables.clone();
    let sport = w.port_not_on("198.51.100.7", (TCP, ACK), reused);
    let moved = Pkt::tcp("198.51.100.7", sport, ACK);
    let stays = Pkt::tcp("198.51.100.8", 5555, ACK);
    let expected = w.table_choice(&moved).unwrap();

    // Before: index 1 at generation 0, every flow recorded there; the
    // second flow on backend 0.
    *w.backend(1) = BackendState {
        id: old,
        address: ip("10.1.0.2"),
        ..w.backend(1).clone()
    };
    w.svc().backends[1] = old;
    w.svc().tables = vec![only(old)];
    assert_eq!(w.send(&moved), Some(old));
    w.svc().tables = vec![only(BackendId(0))];
    assert_eq!(w.send(&stays), Some(BackendId(0)));

    // The old backend leaves and its index goes to another backend.
    *w.backend(1) = BackendState {
        id: reused,
        address: ip("10.1.0.99"),
        ..w.backend(1).clone()
    };
    w.svc().backends[1] = reused;
    w.svc().tables = after;
    w.advance(10);
    let got = w.send(&moved);
    assert_ne!(
        got,
        Some(reused),
        "the new holder of the index inherited a flow"
    );
    assert_eq!(got, Some(expected), "re-selected by the table");
    assert_eq!(w.send(&moved), Some(expected), "and recorded there");
    assert_eq!(w.send(&stays), Some(BackendId(0)), "untouched flows stay");
}
