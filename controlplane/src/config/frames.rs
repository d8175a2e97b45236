//! Frame sizes the buffers must hold (AP-3): what a port's MTU asks of its
//! driver and of the packet pool, refused here rather than dropped later.
//!
//! The pool's data room follows the largest port MTU (`mbuf_pool`), so an
//! mbuf always holds a frame; what can still fall short is
//! - a `net_af_packet` port's frame slot (`framesz`, default 2048): the
//!   kernel truncates a longer frame, which then fails to parse;
//! - the EAL memory under `--no-huge` (`-m`, 64 MiB without it): a
//!   pool of jumbo-sized mbufs may not fit, and DPDK's refusal part-way
//!   through start-up names neither the setting nor the fix.

use super::context::Ctx;
use super::model::DataplaneConfig;
use super::raw::RawDataplane;
use crate::dpdk_args::{devarg, eal_memory_mib, is_af_packet};
use crate::mbuf_pool::{self, AF_PACKET_SLOT_OVERHEAD};

/// `net_af_packet`'s default `blocksz`.
const AF_PACKET_DEFAULT_BLOCKSZ: usize = 4096;
/// EAL's memory under `--no-huge` without `-m` (`MEMSIZE_IF_NO_HUGE_PAGE`).
const NO_HUGE_DEFAULT_MIB: u64 = 64;
const MIB: u64 = 1 << 20;

pub(crate) fn check(cx: &mut Ctx<'_>, raw: &RawDataplane, dp: &DataplaneConfig) {
    for (raw_port, port) in raw.port.iter().zip(&dp.ports) {
        let device = &raw_port.get_ref().device;
        let at = format!("dataplane.port {:?}.device", port.name);
        if let Some(problem) = af_packet_slot(&port.device, port.mtu, port.vlan.is_some()) {
            cx.err(device.span(), &at, problem);
        }
    }
    eal_memory(cx, raw, dp);
}

/// A `net_af_packet` device whose frame slot cannot hold a frame of the
/// port's MTU (or whose slot does not fit its block).
fn af_packet_slot(device: &str, mtu: u16, tagged: bool) -> Option<(String, String)> {
    if !is_af_packet(device) {
        return None;
    }
    // A trunk port's frames carry the 802.1Q tag on the wire.
    let l2 = if tagged { 18 } else { 14 };
    let frame = usize::from(mtu) + l2;
    let need = (frame + AF_PACKET_SLOT_OVERHEAD).next_multiple_of(16);
    let block_for = |framesz: usize| framesz.next_power_of_two().max(AF_PACKET_DEFAULT_BLOCKSZ);
    let Some(framesz) = mbuf_pool::af_packet_framesz(device) else {
        return Some((
            "net_af_packet's framesz is not a number of bytes".into(),
            format!("write framesz={need},blocksz={}", block_for(need)),
        ));
    };
    let blocksz = match devarg(device, "blocksz") {
        None => Some(AF_PACKET_DEFAULT_BLOCKSZ),
        Some(v) => v.parse::<usize>().ok(),
    };
    if framesz > mbuf_pool::AF_PACKET_MAX_FRAMESZ {
        return Some((
            format!(
                "net_af_packet's framesz={framesz} is more than a packet buffer can take \
                 ({} bytes at most)",
                mbuf_pool::AF_PACKET_MAX_FRAMESZ
            ),
            format!("write framesz={need},blocksz={}", block_for(need)),
        ));
    }
    let holds = framesz.saturating_sub(AF_PACKET_SLOT_OVERHEAD);
    if holds < frame {
        let largest_mtu = holds.saturating_sub(l2);
        return Some((
            format!(
                "mtu {mtu} needs {frame}-byte frames, but net_af_packet's frame slot \
                 (framesz={framesz}) holds frames of at most {holds} bytes: the kernel \
                 truncates longer ones"
            ),
            format!(
                "add framesz={need},blocksz={} to the device string, or lower the port's mtu \
                 to at most {largest_mtu}",
                block_for(need)
            ),
        ));
    }
    if blocksz.is_none_or(|b| b < framesz) {
        return Some((
            format!(
                "net_af_packet's blocksz ({}) must be at least its framesz ({framesz})",
                blocksz.map_or("not a number".into(), |b| b.to_string())
            ),
            format!("write blocksz={}", block_for(framesz)),
        ));
    }
    None
}

/// The packet pool against the EAL memory the arguments fix.
fn eal_memory(cx: &mut Ctx<'_>, raw: &RawDataplane, dp: &DataplaneConfig) {
    let Some(args) = &raw.eal_args else { return };
    // With huge pages EAL grows its memory on demand; under --no-huge it
    // has exactly -m.
    if !args.get_ref().iter().any(|a| a == "--no-huge") {
        return;
    }
    let given = eal_memory_mib(args.get_ref());
    let mib = given.unwrap_or(NO_HUGE_DEFAULT_MIB);
    let demand = dp.pool_demand();
    let count = mbuf_pool::mbuf_count(&demand, mbuf_pool::Steering::expected(&demand));
    let room = mbuf_pool::data_room(&demand.ports);
    let need = mbuf_pool::pool_bytes_at_least(count, room);
    if need <= mib * MIB {
        return;
    }
    let largest_mtu = dp.ports.iter().map(|p| p.mtu).max().unwrap_or(1500);
    let fewer = (mib * MIB / (need / u64::from(count).max(1))).saturating_sub(1);
    cx.err(
        args.span(),
        "dataplane.eal_args",
        (
            format!(
                "the packet pool needs at least {} MiB ({count} mbufs of {room} bytes, sized \
                 for the largest port mtu {largest_mtu}) but EAL has {mib} MiB (-m{})",
                need.div_ceil(MIB),
                if given.is_none() {
                    ", the --no-huge default"
                } else {
                    ""
                }
            ),
            format!(
                "raise -m to at least {} (the pool alone; EAL needs some more), or set \
                 dataplane.mbufs to at most {fewer}, or lower the mtu",
                need.div_ceil(MIB) + 64
            ),
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn af_packet_slots_are_checked_against_the_mtu() {
        // 1500 + 14 + 66 = 1580 fits the default 2048.
        assert!(af_packet_slot("net_af_packet0,iface=lb0", 1500, false).is_none());
        assert!(af_packet_slot("net_af_packet0,iface=lb0", 1968, false).is_none());
        let (msg, hint) = af_packet_slot("net_af_packet0,iface=lb0", 1969, false).unwrap();
        assert!(msg.contains("at most 1982 bytes"), "{msg}");
        assert!(hint.contains("framesz=2064,blocksz=4096"), "{hint}");
        assert!(af_packet_slot(
            "net_af_packet0,iface=lb0,framesz=9088,blocksz=16384",
            9000,
            false
        )
        .is_none());
        let (msg, _) =
            af_packet_slot("net_af_packet0,iface=lb0,framesz=9088", 9000, false).unwrap();
        assert!(msg.contains("blocksz (4096)"), "{msg}");
        assert!(af_packet_slot("net_pcap0,framesz=64", 9000, false).is_none());
        // A trunk port's frames are 4 bytes longer.
        assert!(af_packet_slot("net_af_packet0,iface=lb0", 1964, true).is_none());
        let (msg, hint) = af_packet_slot("net_af_packet0,iface=lb0", 1965, true).unwrap();
        assert!(msg.contains("1983-byte frames"), "{msg}");
        assert!(hint.contains("at most 1964"), "{hint}");
    }

    /// deployment.md's worked example: 4 workers, 2 ports with a TAP each,
    /// 32,767 mbufs on RSS NICs (small steering rings for what RSS on
    /// 5-tuples leaves, or none on addresses), 65,535 when the workers
    /// steer everything.
    #[test]
    fn the_deployment_worked_example() {
        use mbuf_pool::{data_room, mbuf_count, Steering};
        let text = "[dataplane]\nworkers = 4\n\
                    [[dataplane.port]]\nname = \"a\"\ndevice = \"0000:03:00.0\"\n\
                    address = \"192.0.2.1/24\"\ntap = \"sl-a\"\n\
                    [[dataplane.port]]\nname = \"b\"\ndevice = \"0000:03:00.1\"\n\
                    address = \"198.51.100.1/24\"\ntap = \"sl-b\"\n";
        let dp = crate::config::load_str(text, "test.toml")
            .unwrap()
            .dataplane;
        let demand = dp.pool_demand();
        assert_eq!(Steering::expected(&demand), Steering::Rare);
        assert_eq!(mbuf_count(&demand, Steering::Off), 32_767);
        assert_eq!(mbuf_count(&demand, Steering::Rare), 32_767);
        assert_eq!(mbuf_count(&demand, Steering::On), 65_535);
        assert_eq!(data_room(&demand.ports), 2_176);
    }
}
