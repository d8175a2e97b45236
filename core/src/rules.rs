//! Forwarding rules: (VIP, protocol, port range) → service (FR-1…FR-3).

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
/// VIPs are few (tens to hundreds) and looked up for every packet, so they
/// live in two sorted arrays of plain integers — IPv4 as `u32`, IPv6 as
/// `u128` — searched by binary search: a handful of integer compares, no
/// hashing, trivially immutable. Each VIP's rules (usually one to three)
/// are scanned in config order.
#[derive(Clone, Debug, Default)]
pub struct RuleTable {
    v4: Vec<(u32, Box<[ForwardingRule]>)>,
    v6: Vec<(u128, Box<[ForwardingRule]>)>,
}

impl RuleTable {
    /// Builds the table. Overlap checking (FR-2) is the config validator's
    /// job; if overlapping rules get here, the first in config order wins.
    pub fn new(rules: Vec<ForwardingRule>) -> Self {
        let mut v4: Vec<(u32, Vec<ForwardingRule>)> = Vec::new();
        let mut v6: Vec<(u128, Vec<ForwardingRule>)> = Vec::new();
        for rule in rules {
            match rule.vip {
                IpAddr::V4(a) => push_rule(&mut v4, u32::from(a), rule),
                IpAddr::V6(a) => push_rule(&mut v6, u128::from(a), rule),
            }
        }
        v4.sort_by_key(|v| v.0);
        v6.sort_by_key(|v| v.0);
        Self {
            v4: v4
                .into_iter()
                .map(|(k, r)| (k, r.into_boxed_slice()))
                .collect(),
            v6: v6
                .into_iter()
                .map(|(k, r)| (k, r.into_boxed_slice()))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    pub fn rules(&self) -> impl Iterator<Item = &ForwardingRule> {
        let v4 = self.v4.iter().flat_map(|(_, r)| r.iter());
        let v6 = self.v6.iter().flat_map(|(_, r)| r.iter());
        v4.chain(v6)
    }

    #[inline]
    fn rules_of(&self, addr: IpAddr) -> Option<&[ForwardingRule]> {
        match addr {
            IpAddr::V4(a) => self.rules_of_v4(u32::from(a)),
            IpAddr::V6(a) => {
                let k = u128::from(a);
                let i = self.v6.binary_search_by_key(&k, |v| v.0).ok()?;
                self.v6.get(i).map(|v| &*v.1)
            }
        }
    }

    /// [`RuleTable::lookup`] for an IPv4 packet with ports, on plain
    /// integers (the worker's IPv4 fast path).
    #[inline(always)]
    pub fn lookup_v4_ports(
        &self,
        dst: u32,
        ip_proto: u8,
        dst_port: u16,
    ) -> Result<&ForwardingRule, RuleMiss> {
        let rules = self.rules_of_v4(dst).ok_or(RuleMiss::NotVip)?;
        find_rule(rules, ip_proto, Some(dst_port))
    }

    /// The rules of IPv4 VIP `dst`, by a binary search written out here:
    /// `binary_search_by_key` stayed an out-of-line call on every packet.
    /// With one VIP it is one compare.
    #[inline(always)]
    fn rules_of_v4(&self, dst: u32) -> Option<&[ForwardingRule]> {
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
        self.v4.get(base).filter(|v| v.0 == dst).map(|v| &*v.1)
    }

    pub fn is_vip(&self, addr: IpAddr) -> bool {
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
        let proto_ok = match r.protocol {
            RuleProtocol::Tcp => ip_proto == 6,
            RuleProtocol::Udp => ip_proto == 17,
            RuleProtocol::L3Default => true,
        };
        if proto_ok && r.ports.matches(dst_port) {
            return Ok(r);
        }
    }
    Err(RuleMiss::NoRule)
}

fn push_rule<K: PartialEq>(list: &mut Vec<(K, Vec<ForwardingRule>)>, key: K, rule: ForwardingRule) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, rules)) => rules.push(rule),
        None => list.push((key, vec![rule])),
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
