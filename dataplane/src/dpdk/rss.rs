//! A port's RSS: which hash types to ask of the device, with which key,
//! and where that leaves each tracked packet (AP-1,
//! [`sluice_core::steering::RxPlacement`]).
//!
//! With one RX queue per worker, RSS picks each packet's worker. Asked to
//! hash TCP and unfragmented UDP on their 5-tuple (and everything else on
//! its addresses), a device sends every packet of a 5-tuple flow to one
//! queue, so one busy client address spreads over every worker and those
//! packets need no steering. sluice sets its own key ([`sluice_core::rss::KEY`])
//! and a round-robin redirection table, and reads the table back: the
//! workers then compute the device's choice for what it does not place by
//! 5-tuple (ICMP errors, fragments, 2/3-tuple keys) and steer those.

use sluice_core::rss::{RssModel, KEY};
use sluice_core::steering::RxPlacement;

use super::error::DpdkError;
use super::ids::PortId;

// RSS hash-function bits from rte_ethdev.h (RTE_BIT64 macros, which bindgen
// cannot evaluate).
const RSS_IPV4: u64 = 1 << 2;
const RSS_FRAG_IPV4: u64 = 1 << 3;
const RSS_NONFRAG_IPV4_TCP: u64 = 1 << 4;
const RSS_NONFRAG_IPV4_UDP: u64 = 1 << 5;
const RSS_NONFRAG_IPV4_OTHER: u64 = 1 << 7;
const RSS_IPV6: u64 = 1 << 8;
const RSS_FRAG_IPV6: u64 = 1 << 9;
const RSS_NONFRAG_IPV6_TCP: u64 = 1 << 10;
const RSS_NONFRAG_IPV6_UDP: u64 = 1 << 11;
const RSS_NONFRAG_IPV6_OTHER: u64 = 1 << 13;

/// The hash types that hash on addresses alone.
const ADDRESSES_ONLY: u64 =
    RSS_IPV4 | RSS_FRAG_IPV4 | RSS_NONFRAG_IPV4_OTHER | RSS_IPV6 | RSS_FRAG_IPV6;

/// What a device must hash for 5-tuple placement: TCP and UDP on their
/// 4-tuple, any other IP packet on its addresses. (virtio-net reports no
/// FRAG or OTHER types: its IPv4/IPv6 types cover every packet not hashed
/// on ports.)
const FIVE_TUPLES: u64 = RSS_IPV4
    | RSS_NONFRAG_IPV4_TCP
    | RSS_NONFRAG_IPV4_UDP
    | RSS_IPV6
    | RSS_NONFRAG_IPV6_TCP
    | RSS_NONFRAG_IPV6_UDP;

/// Everything worth asking for under 5-tuple placement, where offered.
const FIVE_TUPLES_WANTED: u64 =
    FIVE_TUPLES | RSS_FRAG_IPV4 | RSS_NONFRAG_IPV4_OTHER | RSS_FRAG_IPV6 | RSS_NONFRAG_IPV6_OTHER;

/// The shortest key the model's inputs need (a 36-byte IPv6 4-tuple plus
/// the 32-bit window).
const KEY_LEN: usize = KEY.len();

/// How a port's RX is spread over its queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RssPlan {
    /// `rss_hf` to configure (0: no RSS mode).
    pub(super) hash_types: u64,
    /// The device key: [`KEY`] followed by zeros to the device's key size,
    /// when the plan is 5-tuple placement.
    pub(super) key: Option<Vec<u8>>,
    /// Where tracked packets are once the port runs (before its table is
    /// read back: see [`model`]).
    pub(super) placement: RxPlacement,
}

/// The plan for `queues` RX queues on a device reporting `info`. `rss`:
/// configure RSS at all (not for TAPs, where the kernel picks the queue);
/// `five_tuples`: hash TCP and UDP on their ports where the device can.
pub(super) fn plan(
    queues: u16,
    rss: bool,
    five_tuples: bool,
    info: &dpdk_sys::rte_eth_dev_info,
) -> RssPlan {
    let offered = info.flow_type_rss_offloads;
    if queues <= 1 {
        return RssPlan {
            hash_types: 0,
            key: None,
            placement: RxPlacement::Kept,
        };
    }
    let key_size = usize::from(info.hash_key_size);
    let modelable = info.reta_size.is_power_of_two() && (key_size == 0 || key_size >= KEY_LEN);
    if rss && five_tuples && offered & FIVE_TUPLES == FIVE_TUPLES && modelable {
        let mut key = KEY.to_vec();
        key.resize(key_size.max(KEY_LEN), 0);
        return RssPlan {
            hash_types: FIVE_TUPLES_WANTED & offered,
            key: Some(key),
            placement: RxPlacement::FiveTuplesKept,
        };
    }
    // RSS on addresses, asked for or what the device can do instead:
    // every key's packets on one queue.
    if rss && offered & ADDRESSES_ONLY == ADDRESSES_ONLY {
        return RssPlan {
            hash_types: ADDRESSES_ONLY,
            key: None,
            placement: RxPlacement::Kept,
        };
    }
    // A device that hashes none of these (virtio-net without
    // VIRTIO_NET_F_RSS: vhost-net, vhost-user, QEMU's default) is left to
    // spread its queues its own way: asking it for RSS fails
    // rte_eth_dev_configure with ENOTSUP. Either way the workers steer.
    let wanted = if five_tuples {
        FIVE_TUPLES_WANTED
    } else {
        ADDRESSES_ONLY
    };
    RssPlan {
        hash_types: if rss { wanted & offered } else { 0 },
        key: None,
        placement: RxPlacement::Software,
    }
}

/// Sets a started port's redirection table round robin over `queues`
/// queues and reads it back: the model of its RSS. Err when the device
/// lets neither be done; the port is then steered in software.
pub(super) fn model(
    id: PortId,
    name: &str,
    reta_size: u16,
    queues: u16,
) -> Result<RssModel, DpdkError> {
    let groups = usize::from(reta_size).div_ceil(dpdk_sys::RTE_ETH_RETA_GROUP_SIZE as usize);
    let mut table = vec![dpdk_sys::rte_eth_rss_reta_entry64::default(); groups];
    let wanted = RssModel::round_robin(usize::from(reta_size), queues);
    for (group, chunk) in table.iter_mut().zip(wanted.chunks(64)) {
        group.mask = u64::MAX >> (64 - chunk.len());
        group.reta[..chunk.len()].copy_from_slice(chunk);
    }
    // SAFETY: port id valid and started; table holds reta_size entries
    // in groups of 64, as the call reads them.
    let rc =
        unsafe { dpdk_sys::rte_eth_dev_rss_reta_update(id.get(), table.as_mut_ptr(), reta_size) };
    // A device that keeps its own table (-ENOTSUP) is modelled as it is.
    if rc != 0 && rc != -(dpdk_sys::ENOTSUP as i32) {
        return Err(DpdkError::from_rc(
            format!("rte_eth_dev_rss_reta_update({name})"),
            rc,
        ));
    }
    for group in &mut table {
        group.reta = [0; 64];
    }
    // SAFETY: as above; the masks still select every entry.
    let rc =
        unsafe { dpdk_sys::rte_eth_dev_rss_reta_query(id.get(), table.as_mut_ptr(), reta_size) };
    if rc != 0 {
        return Err(DpdkError::from_rc(
            format!("rte_eth_dev_rss_reta_query({name})"),
            rc,
        ));
    }
    let reta: Vec<u16> = table
        .iter()
        .flat_map(|g| g.reta)
        .take(usize::from(reta_size))
        .collect();
    RssModel::new(&reta, queues)
        .map_err(|e| DpdkError::msg(format!("RSS redirection table of {name}"), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(offloads: u64, reta_size: u16, key_size: u8) -> dpdk_sys::rte_eth_dev_info {
        dpdk_sys::rte_eth_dev_info {
            flow_type_rss_offloads: offloads,
            reta_size,
            hash_key_size: key_size,
            ..Default::default()
        }
    }

    /// virtio-net with VIRTIO_NET_F_RSS (DPDK 22.11's `VIRTIO_NET_RSS_SUPPORTED`
    /// minus the IPv6 extension types): 5-tuple placement.
    const VIRTIO_RSS: u64 = RSS_IPV4
        | RSS_NONFRAG_IPV4_TCP
        | RSS_NONFRAG_IPV4_UDP
        | RSS_IPV6
        | RSS_NONFRAG_IPV6_TCP
        | RSS_NONFRAG_IPV6_UDP;

    #[test]
    fn ap_1_a_device_hashing_5_tuples_places_them_with_sluices_key() {
        let p = plan(2, true, true, &info(VIRTIO_RSS, 128, 40));
        assert_eq!(p.placement, RxPlacement::FiveTuplesKept);
        assert_eq!(p.hash_types, VIRTIO_RSS);
        assert_eq!(p.key.as_deref(), Some(&KEY[..]));
        // A 52-byte key (i40e, ice): sluice's, then zeros.
        let all = FIVE_TUPLES_WANTED | (1 << 6);
        let p = plan(4, true, true, &info(all, 512, 52));
        assert_eq!(p.hash_types, FIVE_TUPLES_WANTED);
        let key = p.key.unwrap();
        assert_eq!((&key[..40], &key[40..]), (&KEY[..], &[0u8; 12][..]));
    }

    #[test]
    fn ap_1_what_cannot_be_modelled_or_hashed_is_steered() {
        // No table to read (reta_size 0), or a short key: steered.
        for i in [info(VIRTIO_RSS, 0, 40), info(VIRTIO_RSS, 128, 16)] {
            let p = plan(2, true, true, &i);
            assert_eq!(p.placement, RxPlacement::Software);
            assert_eq!(p.hash_types, VIRTIO_RSS);
        }
        // Addresses only, where the device cannot be modelled but hashes
        // every address type: nothing is steered.
        let p = plan(2, true, true, &info(FIVE_TUPLES_WANTED, 0, 40));
        assert_eq!(
            (p.hash_types, p.placement),
            (ADDRESSES_ONLY, RxPlacement::Kept)
        );
        // No RSS (virtio-net without VIRTIO_NET_F_RSS): no RSS mode at all.
        let p = plan(2, true, true, &info(0, 0, 0));
        assert_eq!((p.hash_types, p.placement), (0, RxPlacement::Software));
        // A TAP: the kernel picks the queue.
        let p = plan(2, false, true, &info(VIRTIO_RSS, 128, 40));
        assert_eq!((p.hash_types, p.placement), (0, RxPlacement::Software));
        // One queue: nothing to place.
        let p = plan(1, true, true, &info(0, 0, 0));
        assert_eq!((p.hash_types, p.placement), (0, RxPlacement::Kept));
    }

    #[test]
    fn ap_1_rss_on_addresses_keeps_every_key_on_one_queue() {
        let p = plan(2, true, false, &info(FIVE_TUPLES_WANTED, 128, 40));
        assert_eq!(
            (p.hash_types, p.placement),
            (ADDRESSES_ONLY, RxPlacement::Kept)
        );
        // Without the fragment types, an address pair's fragments could
        // reach another queue: steered.
        let p = plan(2, true, false, &info(VIRTIO_RSS, 128, 40));
        assert_eq!(p.placement, RxPlacement::Software);
    }
}
