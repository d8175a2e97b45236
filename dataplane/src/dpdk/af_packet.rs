//! The kernel's receive drops on `net_af_packet`'s sockets.
//!
//! The kernel drops a frame when the socket's RX ring (`framecnt` frames)
//! is full, and counts it in the socket's `PACKET_STATISTICS`. DPDK 22.11's
//! af_packet PMD never reads that count (its `imissed` stays 0, it has no
//! xstats), so these drops were invisible. This reads it from the PMD's
//! own sockets, found as this process's packet sockets bound to the
//! port's interface (`/proc/net/packet` gives their inodes and interface,
//! `/proc/self/fd` the descriptors). Reading the statistics resets them in
//! the kernel, so the totals are accumulated here.

use std::collections::HashSet;
use std::sync::Mutex;

/// The accumulated kernel drops of one af_packet port.
#[derive(Debug)]
pub struct KernelDrops {
    ifindex: u32,
    total: Mutex<u64>,
}

impl KernelDrops {
    /// For the interface `iface` (the PMD's `iface=` devarg); None if it
    /// does not exist.
    pub fn for_iface(iface: &str) -> Option<Self> {
        let name = std::ffi::CString::new(iface).ok()?;
        // SAFETY: `name` is a valid NUL-terminated string for the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        (ifindex != 0).then(|| Self {
            ifindex,
            total: Mutex::new(0),
        })
    }

    /// Frames the kernel dropped on this interface's sockets since start:
    /// adds what they counted since the last call, returns the total.
    pub fn total(&self) -> u64 {
        let mut total = self.total.lock().unwrap_or_else(|p| p.into_inner());
        for fd in packet_socket_fds(self.ifindex) {
            *total += u64::from(take_drops(fd));
        }
        *total
    }
}

/// This process's open packet sockets bound to interface `ifindex`.
fn packet_socket_fds(ifindex: u32) -> Vec<i32> {
    let inodes = packet_socket_inodes(
        &std::fs::read_to_string("/proc/net/packet").unwrap_or_default(),
        ifindex,
    );
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let link = std::fs::read_link(e.path()).ok()?;
        let inode = link
            .to_str()?
            .strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse::<u64>()
            .ok()?;
        inodes
            .contains(&inode)
            .then(|| e.file_name().to_str()?.parse().ok())?
    })
    .collect()
}

/// The inodes of `/proc/net/packet`'s sockets on interface `ifindex`
/// (columns: sk RefCnt Type Proto Iface R Rmem User Inode).
fn packet_socket_inodes(table: &str, ifindex: u32) -> HashSet<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let iface: u32 = cols.get(4)?.parse().ok()?;
            let inode: u64 = cols.get(8)?.parse().ok()?;
            (iface == ifindex).then_some(inode)
        })
        .collect()
}

/// The socket's drop count since it was last read (the kernel resets it);
/// 0 when `fd` is not a packet socket (any more).
fn take_drops(fd: i32) -> u32 {
    let mut stats = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `stats` and `len` are valid for writes and `len` is the size
    // of `stats`; the kernel writes at most `len` bytes. A descriptor that
    // is no packet socket (closed and reused since it was listed) makes
    // the call fail, harmlessly.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut stats as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        stats.tp_drops
    } else {
        0
    }
}

/// The `iface=` devarg of a `net_af_packet` device string; None for any
/// other device.
pub fn iface_of(device: &str) -> Option<&str> {
    let mut parts = device.split(',');
    if !parts.next()?.starts_with("net_af_packet") {
        return None;
    }
    parts.find_map(|kv| kv.strip_prefix("iface="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inodes_of_the_interface_only() {
        let table = "sk       RefCnt Type Proto  Iface R Rmem   User   Inode\n\
                     0000000000000000 3      3    0003   7     1 0      0      4242\n\
                     0000000000000000 3      3    0003   8     1 0      0      4343\n\
                     0000000000000000 3      3    0003   7     1 0      0      4444\n";
        assert_eq!(packet_socket_inodes(table, 7), HashSet::from([4242, 4444]));
        assert!(packet_socket_inodes(table, 9).is_empty());
    }

    #[test]
    fn an_interface_by_name() {
        assert!(KernelDrops::for_iface("lo").is_some());
        assert!(KernelDrops::for_iface("no-such-if0").is_none());
        assert_eq!(KernelDrops::for_iface("lo").map(|k| k.total()), Some(0));
    }

    #[test]
    fn iface_from_device_string() {
        assert_eq!(iface_of("net_af_packet0,iface=lb0,qpairs=2"), Some("lb0"));
        assert_eq!(iface_of("net_pcap0,iface=lb0"), None);
        assert_eq!(iface_of("net_af_packet1"), None);
    }

    /// A descriptor that is no packet socket reads as no drops.
    #[test]
    fn a_non_packet_descriptor_reads_as_zero() {
        assert_eq!(take_drops(-1), 0);
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(take_drops(file.as_raw_fd()), 0);
    }
}
