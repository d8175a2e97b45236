//! Forwarding rules: (VIP, protocol, port range) → service (FR-1…FR-3).

use std::collections::HashMap;
use std::net::IpAddr;

use crate::ids::ServiceId;

/// IP protocols a forwarding rule can name (FR-1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleProtocol {
    Tcp,
    Udp,
    /// Every IP protocol (TCP, UDP, ESP, GRE, ICMP, ICMPv6, …).
    L3Default,
}

/// An inclusive destination-port range; `ALL` is `0..=65535` and is the only
/// range that matches packets without ports (non-first fragments, ESP, …: FR-4).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub const ALL: PortRange = PortRange {
        first: 0,
        last: u16::MAX,
    };

    pub fn is_all(&self) -> bool {
        *self == Self::ALL
    }

    /// Whether a packet with destination port `port` (None: no ports) matches.
    // Public for core/tests/rule_lookup.rs.
    pub fn matches(&self, port: Option<u16>) -> bool {
        match port {
            Some(p) => self.first <= p && p <= self.last,
            None => self.is_all(),
        }
    }

    pub fn overlaps(&self, other: &PortRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// One forwarding rule as the dataplane matches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardingRule {
    pub name: String,
    pub vip: IpAddr,
    pub protocol: RuleProtocol,
    pub ports: PortRange,
    pub service: ServiceId,
    /// This rule's slot in each worker's per-rule packet counters
    /// (`stats::RuleCounters`; `RuleCounters::NONE`: not counted apart).
    pub counter: u16,
}

/// Why a packet matched no rule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RuleMiss {
    /// The destination is not a VIP: the packet is not load-balanced (FR-3).
    NotVip,
    /// The destination is a VIP but no rule claims (protocol, port) (FR-3).
    NoRule,
}

/// All forwarding rules, grouped by VIP for lookup.
///
/// VIPs live in two sorted arrays of plain integers — IPv4 as `u32`, IPv6
/// as `u128` — searched by binary search. With more than
/// `SMALL_VIPS` IPv4 VIPs, the worker's fast path
/// ([`RuleTable::lookup_v4_ports`]) finds its VIP through an open-addressed
/// hash index instead (a multiply, a shift and usually one probe, where
/// a search over 10,000 VIPs takes 14 steps on every packet). A VIP's rules are
/// scanned in config order; with more than `SMALL_RULES` of them, the
/// fast path searches TCP's or UDP's port segments (the ports resolved to
/// their first rule in config order when the table is built) instead.
/// Above `SMALL_VIPS`, every TCP or UDP port that a rule of its own
/// takes on a VIP (a one-port segment: most rules, `ports = "443"`) is
/// also in one more hash keyed by VIP, protocol and port together, which
/// the fast path probes first: one probe for a packet to any of 100,000
/// such rules; ranges and misses go on through the VIP's index.
#[derive(Clone, Debug, Default)]
pub struct RuleTable {
    v4: Vec<(u32, VipRules)>,
    v6: Vec<(u128, Box<[ForwardingRule]>)>,
    /// `v4`'s VIPs hashed (empty with at most `SMALL_VIPS` of them).
    v4_index: VipIndex,
    /// `v4`'s one-port segments hashed (empty with at most `SMALL_VIPS`
    /// VIPs).
    v4_ports: PortIndex,
}

/// Up to this many IPv4 VIPs, the fast path binary-searches `v4` (one VIP:
/// one compare); above, it uses the hash index.
pub(crate) const SMALL_VIPS: usize = 8;

/// Up to this many rules on a VIP, the fast path scans them; above, it
/// binary-searches the VIP's port segments of the packet's protocol.
pub(crate) const SMALL_RULES: usize = 4;

/// One IPv4 VIP's rules in config order, and for more than `SMALL_RULES`
/// of them each of TCP's and UDP's destination ports resolved to the rule
/// that takes it.
#[derive(Clone, Debug, Default)]
struct VipRules {
    rules: Box<[ForwardingRule]>,
    tcp: Box<[Segment]>,
    udp: Box<[Segment]>,
}

/// Ports `first..=last` go to `rules[rule]`; a lane's segments are sorted
/// and disjoint, and a port in none of them has no rule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Segment {
    first: u16,
    last: u16,
    rule: u32,
}

/// An open-addressed (linear probing) hash of the IPv4 VIPs: a power-of-two
/// number of slots, at most half of them taken, so every probe sequence
/// ends at an empty slot.
#[derive(Clone, Debug, Default)]
struct VipIndex {
    /// (VIP, its position in `v4` + 1); 0: an empty slot.
    slots: Box<[(u32, u32)]>,
    /// 32 − log2(slots): the multiplicative hash's top bits are the slot.
    shift: u32,
}

/// Fibonacci hashing's multiplier (2^32 / φ, odd).
const VIP_HASH: u32 = 0x9E37_79B9;

impl VipIndex {
    fn new(vips: impl ExactSizeIterator<Item = u32>) -> Self {
        let n = vips.len();
        if n <= SMALL_VIPS {
            return Self::default();
        }
        let bits = (2 * n).next_power_of_two().trailing_zeros().max(1);
        let mut slots = vec![(0u32, 0u32); 1 << bits].into_boxed_slice();
        let mask = slots.len() - 1;
        for (pos, vip) in vips.enumerate() {
            let mut i = Self::home(vip, 32 - bits);
            while slots[i].1 != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = (vip, pos as u32 + 1);
        }
        Self {
            slots,
            shift: 32 - bits,
        }
    }

    #[inline(always)]
    fn home(vip: u32, shift: u32) -> usize {
        (vip.wrapping_mul(VIP_HASH) >> shift) as usize
    }

    /// `vip`'s position in `v4`.
    #[inline(always)]
    fn find(&self, vip: u32) -> Option<usize> {
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = Self::home(vip, self.shift);
        loop {
            let &(key, pos) = self.slots.get(i)?;
            if pos == 0 {
                return None;
            }
            if key == vip {
                return Some(pos as usize - 1);
            }
            i = (i + 1) & mask;
        }
    }
}

/// An open-addressed (linear probing) hash of (VIP, TCP or UDP, port) →
/// the rule that takes that port alone; at most half the slots taken.
#[derive(Clone, Debug, Default)]
struct PortIndex {
    slots: Box<[PortSlot]>,
    /// 64 − log2(slots).
    shift: u32,
    /// Each indexed port's rule, as a VIP's rules of one: the worker's
    /// search then takes it as it takes any VIP's rules (a copy of the
    /// rule per port, ~100 bytes).
    rules: Box<[VipRules]>,
}

#[derive(Copy, Clone, Debug, Default)]
struct PortSlot {
    /// [`port_key`]; 0: an empty slot.
    key: u64,
    /// The port's rule in `PortIndex::rules`.
    rule: u32,
}

/// VIP, protocol lane and port in one nonzero integer.
#[inline(always)]
fn port_key(vip: u32, udp: bool, port: u16) -> u64 {
    ((u64::from(vip) << 17) | (u64::from(port) << 1) | u64::from(udp)) + 1
}

/// Fibonacci hashing's 64-bit multiplier (2^64 / φ, odd).
const PORT_HASH: u64 = 0x9E37_79B9_7F4A_7C15;

impl PortIndex {
    /// `entries`: each key (distinct) with its rule.
    fn new(entries: Vec<(u64, ForwardingRule)>) -> Self {
        if entries.is_empty() {
            return Self::default();
        }
        let bits = (2 * entries.len())
            .next_power_of_two()
            .trailing_zeros()
            .max(1);
        let mut slots = vec![PortSlot::default(); 1 << bits].into_boxed_slice();
        let mask = slots.len() - 1;
        let mut rules = Vec::with_capacity(entries.len());
        for (key, rule) in entries {
            let mut i = Self::home(key, 64 - bits);
            while slots[i].key != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = PortSlot {
                key,
                rule: rules.len() as u32,
            };
            rules.push(VipRules::new(vec![rule]));
        }
        Self {
            slots,
            shift: 64 - bits,
            rules: rules.into_boxed_slice(),
        }
    }

    #[inline(always)]
    fn home(key: u64, shift: u32) -> usize {
        (key.wrapping_mul(PORT_HASH) >> shift) as usize
    }

    /// The position in `rules` of `key`'s rule.
    #[inline(always)]
    fn find(&self, key: u64) -> Option<usize> {
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = Self::home(key, self.shift);
        loop {
            let s = self.slots.get(i)?;
            if s.key == key {
                return Some(s.rule as usize);
            }
            if s.key == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }
}

impl VipRules {
    fn new(rules: Vec<ForwardingRule>) -> Self {
        let (tcp, udp) = if rules.len() > SMALL_RULES {
            (segments(&rules, TCP), segments(&rules, UDP))
        } else {
            Default::default()
        };
        Self {
            rules: rules.into_boxed_slice(),
            tcp,
            udp,
        }
    }

    /// The rule for a packet with ports (the fast path's search).
    #[inline(always)]
    fn find_with_port(&self, ip_proto: u8, dst_port: u16) -> Result<&ForwardingRule, RuleMiss> {
        if self.rules.len() <= SMALL_RULES {
            return find_rule(&self.rules, ip_proto, Some(dst_port));
        }
        self.find_in_segments(ip_proto, dst_port)
    }

    /// `find_with_port` above `SMALL_RULES` rules: out of line, so that
    /// the small case inlined into the worker stays as small as it was.
    #[inline(never)]
    fn find_in_segments(&self, ip_proto: u8, dst_port: u16) -> Result<&ForwardingRule, RuleMiss> {
        let mut lane: &[Segment] = match ip_proto {
            TCP => &self.tcp,
            UDP => &self.udp,
            _ => return find_rule(&self.rules, ip_proto, Some(dst_port)),
        };
        // Halve to the last segment starting at or before the port (the
        // slices need no bounds checks).
        while lane.len() > 1 {
            let half = lane.len() / 2;
            lane = if lane[half].first <= dst_port {
                &lane[half..]
            } else {
                &lane[..half]
            };
        }
        lane.first()
            .filter(|s| s.first <= dst_port && dst_port <= s.last)
            .and_then(|s| self.rules.get(s.rule as usize))
            .ok_or(RuleMiss::NoRule)
    }
}

const TCP: u8 = 6;
const UDP: u8 = 17;

/// Whether a rule of `protocol` takes IP protocol `ip_proto`.
#[inline(always)]
fn protocol_matches(protocol: RuleProtocol, ip_proto: u8) -> bool {
    match protocol {
        RuleProtocol::Tcp => ip_proto == TCP,
        RuleProtocol::Udp => ip_proto == UDP,
        RuleProtocol::L3Default => true,
    }
}

/// The ports of IP protocol `ip_proto` as sorted disjoint segments, each
/// to the first rule in config order (among `rules`) that takes it: a
/// sweep over the ranges' ends with the rules covering the current port in
/// an ordered set (O(n log n)).
fn segments(rules: &[ForwardingRule], ip_proto: u8) -> Box<[Segment]> {
    use std::collections::BTreeSet;
    // (port, rule, starts): a range's first port and the port after its last.
    let mut events: Vec<(u32, usize, bool)> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        if protocol_matches(r.protocol, ip_proto) && r.ports.first <= r.ports.last {
            events.push((u32::from(r.ports.first), i, true));
            events.push((u32::from(r.ports.last) + 1, i, false));
        }
    }
    events.sort_unstable_by_key(|e| e.0);
    let mut active = BTreeSet::new();
    let mut out: Vec<Segment> = Vec::new();
    let mut k = 0;
    while k < events.len() {
        let at = events[k].0;
        while k < events.len() && events[k].0 == at {
            let (_, rule, starts) = events[k];
            if starts {
                active.insert(rule);
            } else {
                active.remove(&rule);
            }
            k += 1;
        }
        let (Some(&rule), Some(&(next, _, _))) = (active.first(), events.get(k)) else {
            continue;
        };
        // Ports at..next: every one below 65536, so they fit in u16.
        let (first, last) = (at as u16, (next - 1) as u16);
        match out.last_mut() {
            Some(s) if s.rule == rule as u32 && u32::from(s.last) + 1 == at => s.last = last,
            _ => out.push(Segment {
                first,
                last,
                rule: rule as u32,
            }),
        }
    }
    out.into_boxed_slice()
}

impl RuleTable {
    /// Builds the table. Overlap checking (FR-2) is the config validator's
    /// job; if overlapping rules get here, the first in config order wins.
    pub fn new(rules: Vec<ForwardingRule>) -> Self {
        let mut v4: Vec<(u32, Vec<ForwardingRule>)> = Vec::new();
        let mut v6: Vec<(u128, Vec<ForwardingRule>)> = Vec::new();
        let mut at4 = HashMap::new();
        let mut at6 = HashMap::new();
        for rule in rules {
            match rule.vip {
                IpAddr::V4(a) => push_rule(&mut v4, &mut at4, u32::from(a), rule),
                IpAddr::V6(a) => push_rule(&mut v6, &mut at6, u128::from(a), rule),
            }
        }
        v4.sort_by_key(|v| v.0);
        v6.sort_by_key(|v| v.0);
        let v4: Vec<(u32, VipRules)> = v4.into_iter().map(|(k, r)| (k, VipRules::new(r))).collect();
        let v4_index = VipIndex::new(v4.iter().map(|v| v.0));
        let v4_ports = if v4.len() > SMALL_VIPS {
            PortIndex::new(one_port_segments(&v4))
        } else {
            PortIndex::default()
        };
        Self {
            v4_ports,
            v4,
            v6: v6
                .into_iter()
                .map(|(k, r)| (k, r.into_boxed_slice()))
                .collect(),
            v4_index,
        }
    }

    pub fn rules(&self) -> impl Iterator<Item = &ForwardingRule> {
        let v4 = self.v4.iter().flat_map(|(_, r)| r.rules.iter());
        let v6 = self.v6.iter().flat_map(|(_, r)| r.iter());
        v4.chain(v6)
    }

    #[inline]
    fn rules_of(&self, addr: IpAddr) -> Option<&[ForwardingRule]> {
        match addr {
            // IP protocol 0: no rule taken by port alone (TCP and UDP only).
            IpAddr::V4(a) => self.rules_of_v4(u32::from(a), 0, 0).map(|v| &*v.rules),
            IpAddr::V6(a) => {
                let k = u128::from(a);
                let i = self.v6.binary_search_by_key(&k, |v| v.0).ok()?;
                self.v6.get(i).map(|v| &*v.1)
            }
        }
    }

    /// [`RuleTable::lookup`] for an IPv4 packet with ports, on plain
    /// integers (the worker's IPv4 fast path).
    // Public for core/tests/rule_lookup.rs.
    #[inline(always)]
    pub fn lookup_v4_ports(
        &self,
        dst: u32,
        ip_proto: u8,
        dst_port: u16,
    ) -> Result<&ForwardingRule, RuleMiss> {
        let vip = self
            .rules_of_v4(dst, ip_proto, dst_port)
            .ok_or(RuleMiss::NotVip)?;
        vip.find_with_port(ip_proto, dst_port)
    }

    /// The rules of IPv4 VIP `dst`: with few VIPs by a binary search
    /// written out here (`binary_search_by_key` stayed an out-of-line call
    /// on every packet; with one VIP it is one compare), with more by the
    /// hash index.
    #[inline(always)]
    fn rules_of_v4(&self, dst: u32, ip_proto: u8, port: u16) -> Option<&VipRules> {
        if self.v4.len() > SMALL_VIPS {
            return self.rules_of_v4_hashed(dst, ip_proto, port);
        }
        // The last VIP ≤ dst, if any, is at `base`.
        let mut base = 0;
        let mut size = self.v4.len();
        while size > 1 {
            let half = size / 2;
            if self.v4.get(base + half).is_some_and(|v| v.0 <= dst) {
                base += half;
            }
            size -= half;
        }
        self.v4.get(base).filter(|v| v.0 == dst).map(|v| &v.1)
    }

    /// `rules_of_v4` above `SMALL_VIPS` VIPs: for a TCP or UDP `port`
    /// that a rule takes alone on a VIP of more than `SMALL_RULES` rules,
    /// that rule (as a VIP's rules of one), else the VIP's rules. Out of
    /// line, so that the small case inlined into the worker stays as small
    /// as it was.
    #[inline(never)]
    fn rules_of_v4_hashed(&self, dst: u32, ip_proto: u8, port: u16) -> Option<&VipRules> {
        if !self.v4_ports.slots.is_empty() && (ip_proto == TCP || ip_proto == UDP) {
            let hit = self.v4_ports.find(port_key(dst, ip_proto == UDP, port));
            if let Some(one) = hit.and_then(|i| self.v4_ports.rules.get(i)) {
                return Some(one);
            }
        }
        let pos = self.v4_index.find(dst)?;
        self.v4.get(pos).map(|v| &v.1)
    }

    pub(crate) fn is_vip(&self, addr: IpAddr) -> bool {
        self.rules_of(addr).is_some()
    }

    /// The rule for a packet to `dst` with IP protocol number `ip_proto` and
    /// destination port `dst_port` (None: the packet has no ports).
    #[inline]
    pub fn lookup(
        &self,
        dst: IpAddr,
        ip_proto: u8,
        dst_port: Option<u16>,
    ) -> Result<&ForwardingRule, RuleMiss> {
        let rules = self.rules_of(dst).ok_or(RuleMiss::NotVip)?;
        find_rule(rules, ip_proto, dst_port)
    }
}

/// The first of a VIP's rules that takes the protocol and port (FR-1 …
/// FR-4).
#[inline(always)]
fn find_rule(
    rules: &[ForwardingRule],
    ip_proto: u8,
    dst_port: Option<u16>,
) -> Result<&ForwardingRule, RuleMiss> {
    // A plain loop: `Iterator::find` stayed an out-of-line call on every
    // packet to a VIP.
    for r in rules {
        if protocol_matches(r.protocol, ip_proto) && r.ports.matches(dst_port) {
            return Ok(r);
        }
    }
    Err(RuleMiss::NoRule)
}

/// The TCP and UDP ports that a segment of one port covers on a VIP of
/// more than `SMALL_RULES` rules, each with the rule that takes it (first
/// in config order, as the segments resolve it).
fn one_port_segments(v4: &[(u32, VipRules)]) -> Vec<(u64, ForwardingRule)> {
    let mut out = Vec::new();
    // A VIP of a few rules finds them by a short scan, as fast as a
    // probe here: only the lanes of larger VIPs (built above
    // `SMALL_RULES` rules) are indexed.
    for (vip, rules) in v4.iter().filter(|v| v.1.rules.len() > SMALL_RULES) {
        for (proto, lane) in [(TCP, &rules.tcp), (UDP, &rules.udp)] {
            out.extend(lane.iter().filter(|s| s.first == s.last).filter_map(|s| {
                let rule = rules.rules.get(s.rule as usize)?.clone();
                Some((port_key(*vip, proto == UDP, s.first), rule))
            }));
        }
    }
    out
}

/// Appends `rule` to its VIP's list (`at`: a VIP's position in `list`), so
/// that building the table is linear in the rules, not VIPs × rules.
fn push_rule<K: Copy + Eq + std::hash::Hash>(
    list: &mut Vec<(K, Vec<ForwardingRule>)>,
    at: &mut HashMap<K, usize>,
    key: K,
    rule: ForwardingRule,
) {
    match at.get(&key) {
        Some(&i) => list[i].1.push(rule),
        None => {
            at.insert(key, list.len());
            list.push((key, vec![rule]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(vip: &str, protocol: RuleProtocol, ports: PortRange, svc: u16) -> ForwardingRule {
        ForwardingRule {
            name: format!("r{svc}"),
            vip: vip.parse().unwrap(),
            protocol,
            ports,
            service: ServiceId(svc),
            counter: svc,
        }
    }

    /// FR-1, FR-2, FR-3, FR-4: protocol and port matching, several rules per
    /// VIP, misses named, portless packets only match ALL.
    #[test]
    fn fr_1_to_4_rule_lookup() {
        let t = RuleTable::new(vec![
            rule(
                "203.0.113.10",
                RuleProtocol::Tcp,
                PortRange {
                    first: 80,
                    last: 80,
                },
                0,
            ),
            rule("203.0.113.10", RuleProtocol::Udp, PortRange::ALL, 1),
            rule("2001:db8::10", RuleProtocol::L3Default, PortRange::ALL, 2),
            rule(
                "203.0.113.11",
                RuleProtocol::Tcp,
                PortRange {
                    first: 8000,
                    last: 8080,
                },
                3,
            ),
        ]);
        let v4: IpAddr = "203.0.113.10".parse().unwrap();
        assert_eq!(t.lookup(v4, 6, Some(80)).unwrap().service, ServiceId(0));
        assert_eq!(t.lookup(v4, 6, Some(81)), Err(RuleMiss::NoRule));
        assert_eq!(t.lookup(v4, 17, Some(53)).unwrap().service, ServiceId(1));
        assert_eq!(t.lookup(v4, 17, None).unwrap().service, ServiceId(1));
        assert_eq!(t.lookup(v4, 6, None), Err(RuleMiss::NoRule));
        assert_eq!(t.lookup(v4, 50, None), Err(RuleMiss::NoRule));
        let v6: IpAddr = "2001:db8::10".parse().unwrap();
        assert_eq!(t.lookup(v6, 50, None).unwrap().service, ServiceId(2));
        let r: IpAddr = "203.0.113.11".parse().unwrap();
        assert_eq!(t.lookup(r, 6, Some(8000)).unwrap().service, ServiceId(3));
        assert_eq!(t.lookup(r, 6, Some(8080)).unwrap().service, ServiceId(3));
        assert_eq!(t.lookup(r, 6, Some(8081)), Err(RuleMiss::NoRule));
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(t.lookup(other, 6, Some(80)), Err(RuleMiss::NotVip));
        assert!(t.is_vip(v6) && !t.is_vip(other));
    }
}
