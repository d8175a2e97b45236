//! What the established lane reads of a backend, built once per snapshot:
//! whether a live conntrack entry recorded on it is kept as it is, folded
//! into one deadline and the pool epoch its service is at (CT-7, CT-8,
//! CT-10, CT-11); the idle timeout a refreshed entry gets (CT-5); and its
//! prebuilt outer header, which the general path uses too. A hit then
//! compares a few words of one record, instead of reading the backend's
//! and its service's state and deciding the same thing again for every
//! packet.
//!
//! The records are the backends' and services' state when they were
//! made: a snapshot changed afterwards builds them again
//! (`ForwardingState::build_lane_backends`), or, when only some services'
//! health or pools changed, makes those services' records again
//! (`ForwardingState::refresh_lane_backends`).

use crate::backend::BackendState;
use crate::ids::{BackendId, ServiceId};
use crate::outer_header::OuterHeader;
use crate::service::ServiceState;
use crate::time::Millis;

/// One backend's record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaneBackend {
    /// The whole id: a record of an earlier generation of the index is
    /// another backend's.
    id: BackendId,
    /// The backend's service: a key of another service is not kept here.
    service: ServiceId,
    /// The service's pool epoch (CT-11): an entry of another epoch is
    /// decided again.
    pool_epoch: u32,
    /// The service's idle timeout (CT-5).
    idle_timeout_ms: u32,
    /// Entries on the backend are kept while the clock is below this:
    /// never when it is unhealthy (CT-8 decides then), until its draining
    /// deadline when it is draining (CT-10), else always.
    keep_until: Millis,
    header: Option<OuterHeader>,
}

impl LaneBackend {
    /// The record of an index no backend holds: it keeps nothing and has
    /// no header. Its id is the last one, which a backend holds only at
    /// the last index's last generation; such a backend's packets take
    /// the general path, which decides them the same.
    const ABSENT: LaneBackend = LaneBackend {
        id: BackendId(u32::MAX),
        service: ServiceId(u16::MAX),
        pool_epoch: 0,
        idle_timeout_ms: 0,
        keep_until: Millis(0),
        header: None,
    };

    /// The record of `backend` in `service`, with its prebuilt header.
    pub fn new(
        backend: &BackendState,
        service: &ServiceState,
        header: Option<OuterHeader>,
    ) -> Self {
        let keep_until = match (backend.healthy, backend.draining_until) {
            (false, _) => Millis(0),
            (true, Some(deadline)) => deadline,
            (true, None) => Millis(u64::MAX),
        };
        Self {
            id: backend.id,
            service: backend.service,
            pool_epoch: service.pool_epoch,
            idle_timeout_ms: service.tracking.idle_timeout_ms,
            keep_until,
            header,
        }
    }

    /// CT-7, CT-8, CT-10, CT-11: whether an entry of `service`'s key that
    /// recorded this backend at `pool_epoch` is kept on it at `now` as
    /// it is: the backend is healthy, not past its draining deadline, and
    /// of the service's current pool epoch.
    // Public for the control plane's publication tests.
    #[inline(always)]
    pub fn keeps(&self, service: ServiceId, pool_epoch: u32, now: Millis) -> bool {
        self.service == service && self.pool_epoch == pool_epoch && now < self.keep_until
    }

    /// The idle timeout of a refreshed entry (CT-5).
    #[inline(always)]
    pub(crate) fn idle_timeout_ms(&self) -> u32 {
        self.idle_timeout_ms
    }

    /// The prebuilt outer header, if the backend has one.
    #[inline(always)]
    pub(crate) fn header(&self) -> Option<&OuterHeader> {
        self.header.as_ref()
    }
}

/// Every backend's [`LaneBackend`], indexed by [`BackendId::index`], an
/// index no backend holds with [`LaneBackend::ABSENT`] (one test of the
/// id finds both kinds of miss); part of a snapshot
/// (`ForwardingState::build_lane_backends`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneBackends(Vec<LaneBackend>);

impl FromIterator<Option<LaneBackend>> for LaneBackends {
    fn from_iter<I: IntoIterator<Item = Option<LaneBackend>>>(records: I) -> Self {
        Self(
            records
                .into_iter()
                .map(|r| r.unwrap_or(LaneBackend::ABSENT))
                .collect(),
        )
    }
}

impl LaneBackends {
    /// The record of backend `id` (its whole id: not an earlier or later
    /// generation of the index).
    #[inline(always)]
    pub fn get(&self, id: BackendId) -> Option<&LaneBackend> {
        self.0.get(id.index()).filter(|r| r.id == id)
    }

    /// The prebuilt outer header of the backend at `id`'s index (for its
    /// own service's encapsulation). By index alone: the general path
    /// asks only for a backend that its packet's service's table or
    /// conntrack entry named in this snapshot, which is the index's
    /// current holder.
    #[inline]
    pub fn header(&self, id: BackendId) -> Option<&OuterHeader> {
        self.0.get(id.index())?.header()
    }

    /// `backend`'s record made again from its state and its service's,
    /// its prebuilt header kept (a change of health, weight or pool
    /// changes no header). Nothing when the table has no record of it.
    pub fn refresh(&mut self, backend: &BackendState, service: &ServiceState) {
        if let Some(r) = self
            .0
            .get_mut(backend.id.index())
            .filter(|r| r.id == backend.id)
        {
            *r = LaneBackend::new(backend, service, r.header);
        }
    }

    /// The same records without their prebuilt headers: every packet
    /// takes the general encapsulation (tests, and measuring what the
    /// headers are worth).
    pub fn without_headers(mut self) -> Self {
        for r in &mut self.0 {
            r.header = None;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affinity::SessionAffinity;
    use crate::backend::{Egress, Pool};
    use crate::encap::Encapsulation;
    use crate::port::PortState;
    use crate::service::ConnectionTracking;
    use std::net::{IpAddr, Ipv4Addr};

    fn backend(healthy: bool, draining_until: Option<Millis>) -> BackendState {
        BackendState {
            id: BackendId::new(3, 2),
            service: ServiceId(1),
            address: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
            healthy,
            weight: 1,
            pool: Pool::Primary,
            draining_until,
            egress: Egress::default(),
        }
    }

    /// A table of four indexes holding only `record`, at index 3.
    fn table_of(record: LaneBackend) -> LaneBackends {
        let mut records: Vec<Option<LaneBackend>> = vec![None; 4];
        records[3] = Some(record);
        records.into_iter().collect()
    }

    fn service(pool_epoch: u32) -> ServiceState {
        ServiceState {
            name: "s".into(),
            encapsulation: Encapsulation::L2,
            affinity: SessionAffinity::None,
            tracking: ConnectionTracking {
                idle_timeout_ms: 7_000,
                ..ConnectionTracking::default()
            },
            draining_timeout_ms: 0,
            drain_on_failover: true,
            follow_fragments: false,
            pool_epoch,
            tables: vec![],
            backends: vec![],
            quic_lb: None,
        }
    }

    /// CT-7: a healthy backend keeps the entries of its service's key at
    /// the service's epoch, whatever the time.
    #[test]
    fn ct7_healthy_backend_keeps_its_service_entries() {
        let r = LaneBackend::new(&backend(true, None), &service(4), None);
        assert!(r.keeps(ServiceId(1), 4, Millis(0)));
        assert!(r.keeps(ServiceId(1), 4, Millis(u64::MAX - 1)));
        assert!(
            !r.keeps(ServiceId(2), 4, Millis(5)),
            "another service's key"
        );
        assert_eq!(r.idle_timeout_ms(), 7_000);
    }

    /// CT-8: an unhealthy backend's entries are never kept by the lane.
    #[test]
    fn ct8_unhealthy_backend_keeps_nothing() {
        let r = LaneBackend::new(&backend(false, None), &service(4), None);
        assert!(!r.keeps(ServiceId(1), 4, Millis(0)));
        assert!(!r.keeps(ServiceId(1), 4, Millis(1_000)));
    }

    /// CT-10: a draining backend keeps entries until its deadline only.
    #[test]
    fn ct10_draining_backend_keeps_until_its_deadline() {
        let r = LaneBackend::new(&backend(true, Some(Millis(500))), &service(4), None);
        assert!(r.keeps(ServiceId(1), 4, Millis(499)));
        assert!(!r.keeps(ServiceId(1), 4, Millis(500)));
        let unhealthy = LaneBackend::new(&backend(false, Some(Millis(500))), &service(4), None);
        assert!(!unhealthy.keeps(ServiceId(1), 4, Millis(10)));
    }

    /// CT-11: an entry of another pool epoch is decided again.
    #[test]
    fn ct11_other_pool_epoch_is_not_kept() {
        let r = LaneBackend::new(&backend(true, None), &service(4), None);
        assert!(!r.keeps(ServiceId(1), 3, Millis(5)));
        assert!(!r.keeps(ServiceId(1), 5, Millis(5)));
    }

    /// A record is found by its whole id: another generation of the same
    /// index is another backend.
    #[test]
    fn records_are_found_by_whole_id() {
        let table = table_of(LaneBackend::new(&backend(true, None), &service(0), None));
        assert!(table.get(BackendId::new(3, 2)).is_some());
        assert!(table.get(BackendId::new(3, 1)).is_none());
        assert!(table.get(BackendId::new(2, 2)).is_none());
        assert!(table.get(BackendId::new(9, 2)).is_none());
        // An index no backend holds: neither its record nor a header.
        assert!(table.get(BackendId::new(1, 0)).is_none());
        assert!(table.header(BackendId::new(1, 0)).is_none());
        assert!(!LaneBackend::ABSENT.keeps(ServiceId(u16::MAX), 0, Millis(0)));
    }

    /// CT-8, CT-11: a record made again after a health flip or a pool
    /// change says so, and keeps its header.
    #[test]
    fn ct8_ct11_refresh_follows_health_and_pool() {
        let b = BackendState {
            egress: Egress {
                port: 0,
                next_hop_mac: Some([2, 0, 0, 0, 0, 9]),
            },
            ..backend(true, None)
        };
        let port = PortState {
            name: "p".into(),
            mac: [2, 0, 0, 0, 0, 1],
            ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
            ipv6: None,
            mtu: 1500,
            vlan: None,
        };
        let header = OuterHeader::build(Encapsulation::L2, &b, &port).expect("an L2 header");
        let mut table = table_of(LaneBackend::new(&b, &service(0), Some(header)));
        assert!(table.get(b.id).unwrap().keeps(ServiceId(1), 0, Millis(5)));
        table.refresh(&backend(false, None), &service(0));
        assert!(!table.get(b.id).unwrap().keeps(ServiceId(1), 0, Millis(5)));
        table.refresh(&b, &service(1));
        assert!(!table.get(b.id).unwrap().keeps(ServiceId(1), 0, Millis(5)));
        assert!(table.get(b.id).unwrap().keeps(ServiceId(1), 1, Millis(5)));
        // Another generation of the index: not its record, left alone.
        let other = BackendState {
            id: BackendId::new(3, 1),
            ..backend(false, None)
        };
        table.refresh(&other, &service(1));
        assert!(table.get(b.id).unwrap().keeps(ServiceId(1), 1, Millis(5)));
        assert_eq!(table.get(b.id).unwrap().header(), Some(&header));
    }
}
