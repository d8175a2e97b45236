//! Who owns each tracking key, and which of each port's packets already
//! reach their owner (AP-1, `sluice_core::steering`), decided once from
//! the started ports for the workers' steering and the conntrack hand-off
//! alike.

use dataplane::dpdk::Port;
use sluice_core::steering::{Owners, RxPlacement};

/// The run's ownership.
#[derive(Debug)]
pub struct Ownership {
    /// One owner function for every port.
    pub owners: Owners,
    /// Per config port.
    pub placement: Vec<RxPlacement>,
    /// Ports whose RSS was planned on 5-tuples but are steered in
    /// software, with why (logged once, by the steering set-up).
    pub fallbacks: Vec<(String, String)>,
}

impl Ownership {
    /// Some port's RSS hashes on addresses only: its keys' owners are the
    /// NIC's choice, which this process does not compute.
    pub fn nic_chooses_unmodelled(&self) -> bool {
        self.owners.workers() > 1 && self.placement.contains(&RxPlacement::Kept)
    }
}

/// The ownership of a run with `workers` workers on `ports`: the first
/// port with RSS on 5-tuples sets the owner function (its RSS, modelled);
/// another whose table differs is steered in software by it. Without
/// such a port, software steering's own hash.
pub fn of(ports: &[Port], workers: usize) -> Ownership {
    if workers <= 1 {
        return Ownership {
            owners: Owners::Hash { workers: 1 },
            placement: vec![RxPlacement::Kept; ports.len()],
            fallbacks: Vec::new(),
        };
    }
    let model = ports
        .iter()
        .filter(|p| p.rx_placement() == RxPlacement::FiveTuplesKept)
        .find_map(|p| p.rss_model().cloned());
    let mut fallbacks: Vec<(String, String)> = ports
        .iter()
        .filter_map(|p| Some((p.name().to_string(), p.rss_fallback()?.to_string())))
        .collect();
    let placement = ports
        .iter()
        .map(|p| match (p.rx_placement(), p.rss_model(), &model) {
            (RxPlacement::FiveTuplesKept, Some(m), Some(first)) if m != first => {
                fallbacks.push((
                    p.name().to_string(),
                    format!(
                        "its RSS redirection table differs from port {}'s",
                        ports
                            .iter()
                            .find(|q| q.rss_model() == Some(first))
                            .map_or("?", |q| q.name())
                    ),
                ));
                RxPlacement::Software
            }
            (placement, ..) => placement,
        })
        .collect();
    Ownership {
        owners: model.map_or(Owners::Hash { workers }, Owners::Rss),
        placement,
        fallbacks,
    }
}
