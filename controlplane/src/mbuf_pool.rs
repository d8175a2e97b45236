//! The packet pool's shape: how much one mbuf holds and how many there are.
//!
//! The data room is sized from the largest frame any port can hand the
//! pipeline, so every received frame fits one segment (the pipeline drops
//! chained mbufs as `multi_segment`): the largest port MTU plus an Ethernet
//! header and two VLAN tags, never less than DPDK's default 2 KiB, plus
//! DPDK's headroom, into which the encapsulation prepends its headers (at
//! most 14 + 40 + 8 + 8 + 8 = 78 bytes, GENEVE over IPv6 with a Fragment
//! header, minus the client's own Ethernet header it replaces). A
//! `net_af_packet` port also needs its whole frame slot (`framesz`) to fit:
//! the PMD refuses queues whose slot an mbuf cannot take.
//!
//! The pool is sized from a [`Demand`], the dataplane as the pool sees it,
//! which the configuration's `[dataplane]` gives: its validation checks the
//! pool against the EAL memory, and the run makes the pool.

use dataplane::dpdk::MBUF_HEADROOM;

use crate::dpdk_args::{devarg, is_af_packet, pci_address};

/// Ethernet header plus two VLAN tags (802.1ad + 802.1Q), which the
/// pipeline accepts in front of the IP packet.
pub const MAX_L2_LEN: usize = 14 + 2 * 4;

/// The smallest frame room: DPDK's default (`RTE_MBUF_DEFAULT_DATAROOM`).
const MIN_FRAME_ROOM: usize = 2048;

/// The largest data room (a `u16` in DPDK, kept a multiple of 64).
pub const MAX_DATA_ROOM: u16 = 65_472;

/// The largest `net_af_packet` `framesz` whose slot one mbuf can take.
pub const AF_PACKET_MAX_FRAMESZ: usize =
    MAX_DATA_ROOM as usize - MBUF_HEADROOM + AF_PACKET_SLOT_DATA_OVERHEAD;

/// `net_af_packet`'s default frame slot (`framesz` devarg), in bytes.
pub const AF_PACKET_DEFAULT_FRAMESZ: usize = 2048;

/// Bytes of a `net_af_packet` frame slot in front of the frame: the
/// kernel places the MAC header at `TPACKET_ALIGN(TPACKET2_HDRLEN + 16) -
/// 14` = 66 (TPACKET_V2), and truncates what does not fit behind it.
pub const AF_PACKET_SLOT_OVERHEAD: usize = 66;

/// What DPDK's `net_af_packet` copies out of a slot at most:
/// `framesz - (TPACKET2_HDRLEN - sizeof(sockaddr_ll))`. Its queue setup
/// refuses a pool whose mbufs cannot take that much.
const AF_PACKET_SLOT_DATA_OVERHEAD: usize = 32;

/// What the pool serves: the dataplane's ports, workers and bursts.
#[derive(Clone, Debug)]
pub struct Demand<'a> {
    /// In port order.
    pub ports: Vec<PortDemand<'a>>,
    /// Packet workers (≥ 1).
    pub workers: u16,
    /// Packets per RX/TX burst.
    pub burst_size: u16,
    /// Mbufs asked for (`dataplane.mbufs`); 0: sized by [`mbuf_count`].
    pub mbufs: u32,
}

/// One port as the pool sees it.
#[derive(Clone, Copy, Debug)]
pub struct PortDemand<'a> {
    /// A DPDK vdev string or a PCI address.
    pub device: &'a str,
    pub mtu: u16,
    /// The port has a TAP (the exception path).
    pub tap: bool,
}

/// The largest frame, VLAN tags included, that a port of `mtu` receives.
pub fn frame_len(mtu: u16) -> usize {
    usize::from(mtu) + MAX_L2_LEN
}

/// A `net_af_packet` port's frame slot in bytes (its `framesz` devarg or
/// the default). None for other drivers, or when `framesz` is not a number.
pub fn af_packet_framesz(device: &str) -> Option<usize> {
    if !is_af_packet(device) {
        return None;
    }
    match devarg(device, "framesz") {
        None => Some(AF_PACKET_DEFAULT_FRAMESZ),
        Some(v) => v.parse().ok(),
    }
}

/// Frame bytes one mbuf must hold for `port`.
fn port_frame_room(port: &PortDemand<'_>) -> usize {
    let slot = af_packet_framesz(port.device)
        .map_or(0, |f| f.saturating_sub(AF_PACKET_SLOT_DATA_OVERHEAD));
    frame_len(port.mtu).max(slot)
}

/// The mbuf data room for these ports: headroom plus the largest frame
/// room, rounded up to a cache line. At most 128 + 9216 + 22 (and what a
/// `framesz` asks, capped so the result stays a `u16`).
pub fn data_room(ports: &[PortDemand<'_>]) -> u16 {
    let frame = ports
        .iter()
        .map(port_frame_room)
        .fold(MIN_FRAME_ROOM, usize::max);
    let room = (MBUF_HEADROOM + frame).next_multiple_of(64);
    u16::try_from(room).unwrap_or(MAX_DATA_ROOM)
}

/// Whether workers hand tracked packets to each other over steering rings
/// (`sluice_core::steering`), and how large the rings are: only with
/// several workers and a port that does not put every tracked packet on
/// its owner's queue. Every slot of every ring may hold an mbuf,
/// `workers × (workers − 1)` rings, so the pool counts them only when
/// they exist: at 64 workers the full-size ones would be 16 million mbufs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Steering {
    /// No rings: one worker, or RSS on addresses on every port.
    Off,
    /// Small rings (`steering::rare_ring_slots`): every port's RSS places
    /// 5-tuple keys, the rings carry the rest.
    Rare,
    /// Full-size rings (`steering::ring_slots`): a port whose RSS places
    /// no tracked packet.
    On,
}

impl Steering {
    /// What `check-config` assumes before any device is probed: a PCI NIC
    /// does RSS on 5-tuples (`sluice run` asks the device itself, and a
    /// NIC that cannot, such as virtio-net without VIRTIO_NET_F_RSS, then
    /// gets a larger pool); every virtual device sluice drives is treated
    /// as one that cannot.
    pub fn expected(dp: &Demand<'_>) -> Steering {
        let rss_less = |p: &PortDemand<'_>| pci_address(p.device).is_none();
        if dp.workers <= 1 {
            Steering::Off
        } else if dp.ports.iter().any(rss_less) {
            Steering::On
        } else {
            Steering::Rare
        }
    }

    /// Slots of each ring (0: no rings).
    pub fn ring_slots(self, burst_size: usize, workers: usize) -> u32 {
        match self {
            Steering::Off => 0,
            Steering::Rare => sluice_core::steering::rare_ring_slots(burst_size, workers),
            Steering::On => sluice_core::steering::ring_slots(burst_size, workers),
        }
    }
}

/// Mbufs in the pool: `dp.mbufs`, or (0) enough for every RX and TX
/// ring, each TAP's rings or relay rings ([`tap_share`]), the steering rings when `steering` is on, and
/// the per-lcore caches and bursts in flight.
pub fn mbuf_count(dp: &Demand<'_>, steering: Steering) -> u32 {
    if dp.mbufs != 0 {
        return dp.mbufs;
    }
    let workers = u32::from(dp.workers);
    let nports = dp.ports.len() as u32;
    let ntaps = dp.ports.iter().filter(|p| p.tap).count() as u32;
    let burst = usize::from(dp.burst_size);
    // Every steering ring into a worker full, and a burst held for each peer.
    let steered = match steering {
        Steering::Off => 0,
        Steering::Rare | Steering::On => {
            workers.saturating_sub(1) * steering.ring_slots(burst, usize::from(dp.workers))
                + (dataplane::dpdk::MAX_BURST as u32) * workers
        }
    };
    let rings = nports * (1024 + 1024) + ntaps * tap_share() + steered;
    (rings * workers + 4096).next_power_of_two() - 1
}

/// Mbufs one worker may hold on one TAP (AP-4): its queue pair's rings
/// (512 + 512 descriptors) when it owns one, else the relay ring to the
/// owner full and a burst held for it. A TAP has fewer queue pairs than
/// workers only when there are more than its limit (16 in DPDK 22.11);
/// counting every worker at the larger of the two holds for any split.
fn tap_share() -> u32 {
    let pair = 512 + 512;
    let relay = dataplane::worker::RELAY_SLOTS + dataplane::dpdk::MAX_BURST as u32;
    pair.max(relay)
}

/// A lower bound of the memory the pool takes: per mbuf the mempool's
/// object header (one cache line), `struct rte_mbuf` (two) and the data
/// room. DPDK adds padding and the pool's ring on top.
pub fn pool_bytes_at_least(count: u32, data_room: u16) -> u64 {
    let per_mbuf = 64 + 128 + u64::from(data_room).next_multiple_of(64);
    u64::from(count) * per_mbuf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(device: &str, mtu: u16) -> PortDemand<'_> {
        PortDemand {
            device,
            mtu,
            tap: false,
        }
    }

    #[test]
    fn the_data_room_holds_the_largest_port_frame_behind_the_headroom() {
        // 1500-byte ports keep DPDK's default 2 KiB (+ headroom).
        assert_eq!(data_room(&[port("net_pcap0", 1500)]), 2048 + 128);
        assert_eq!(data_room(&[port("net_pcap0", 2026)]), 2048 + 128);
        for mtu in [2027u16, 4000, 9000, 9216] {
            let ports = [port("net_pcap0", 1500), port("net_pcap1", mtu)];
            let room = usize::from(data_room(&ports));
            assert!(
                room >= MBUF_HEADROOM + usize::from(mtu) + MAX_L2_LEN,
                "{mtu}"
            );
            assert!(
                room < MBUF_HEADROOM + usize::from(mtu) + MAX_L2_LEN + 64,
                "{mtu}"
            );
        }
    }

    #[test]
    fn an_af_packet_slot_fits_one_mbuf() {
        let p = port("net_af_packet0,iface=lb0,framesz=16384,blocksz=16384", 1500);
        assert!(usize::from(data_room(&[p])) >= MBUF_HEADROOM + 16384 - 32);
        assert_eq!(af_packet_framesz("net_af_packet0,iface=lb0"), Some(2048));
        assert_eq!(af_packet_framesz("net_pcap0,framesz=4096"), None);
    }

    /// `workers` over ports of `devices` (MTU 1500, no TAP), bursts of 32
    /// and the pool sized here: `[dataplane]`'s defaults.
    fn dataplane<'a>(workers: u16, devices: &[&'a str]) -> Demand<'a> {
        Demand {
            ports: devices.iter().map(|d| port(d, 1500)).collect(),
            workers,
            burst_size: 32,
            mbufs: 0,
        }
    }

    /// The steering rings' mbufs grow with the square of the workers, so
    /// they are counted only when there are rings, and small ones where
    /// RSS places 5-tuples: a 64-worker appliance on NICs gets a pool of a
    /// million mbufs (half a million with RSS on addresses and no rings),
    /// not 32 million (AP-1).
    #[test]
    fn the_pool_counts_steering_rings_only_when_workers_steer() {
        let nic = dataplane(64, &["0000:03:00.0", "0000:03:00.1"]);
        assert_eq!(Steering::expected(&nic), Steering::Rare);
        assert_eq!(Steering::Rare.ring_slots(32, 64), 32);
        assert_eq!(mbuf_count(&nic, Steering::Off), (1 << 19) - 1);
        assert_eq!(mbuf_count(&nic, Steering::Rare), (1 << 20) - 1);
        assert_eq!(mbuf_count(&nic, Steering::On), (1 << 25) - 1);
        let pcap = dataplane(16, &["net_pcap0,rx_pcap=a.pcap", "0000:03:00.1"]);
        assert_eq!(Steering::expected(&pcap), Steering::On);
        assert!(mbuf_count(&pcap, Steering::On) > mbuf_count(&pcap, Steering::Off));
        let one = dataplane(1, &["net_pcap0,rx_pcap=a.pcap"]);
        assert_eq!(Steering::expected(&one), Steering::Off);
    }

    /// AP-4: a worker without a TAP queue pair holds at most its relay ring
    /// and a burst, which the pool counts for every worker on every TAP:
    /// 64 workers on a TAP of 16 queue pairs get room for 16 pairs and 48
    /// relay rings.
    #[test]
    fn the_pool_holds_the_tap_queues_and_relay_rings_of_every_worker() {
        let relay = dataplane::worker::RELAY_SLOTS + dataplane::dpdk::MAX_BURST as u32;
        assert!(tap_share() >= 512 + 512 && tap_share() >= relay);
        let mut tap = dataplane(64, &["0000:03:00.0"]);
        tap.ports[0].tap = true;
        let port_rings = 64 * (1024 + 1024);
        let count = mbuf_count(&tap, Steering::Off);
        assert!(
            count >= port_rings + 16 * (512 + 512) + 48 * relay,
            "{count}"
        );
    }
}
