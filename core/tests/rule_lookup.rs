//! The rule table's fast path (`lookup_v4_ports`: the VIP hash
//! index above `SMALL_VIPS` VIPs, the port segments above `SMALL_RULES`
//! rules on a VIP) returns the rule the plain search does: the first rule
//! in config order with the packet's VIP, protocol and port.

use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;
use sluice_core::ids::ServiceId;
use sluice_core::rules::{ForwardingRule, PortRange, RuleMiss, RuleProtocol, RuleTable};

/// The reference: every rule in config order, the first that matches.
fn reference(
    rules: &[ForwardingRule],
    dst: u32,
    ip_proto: u8,
    port: u16,
) -> Result<String, RuleMiss> {
    let dst = IpAddr::V4(Ipv4Addr::from(dst));
    if !rules.iter().any(|r| r.vip == dst) {
        return Err(RuleMiss::NotVip);
    }
    rules
        .iter()
        .find(|r| {
            r.vip == dst
                && match r.protocol {
                    RuleProtocol::Tcp => ip_proto == 6,
                    RuleProtocol::Udp => ip_proto == 17,
                    RuleProtocol::L3Default => true,
                }
                && r.ports.matches(Some(port))
        })
        .map(|r| r.name.clone())
        .ok_or(RuleMiss::NoRule)
}

fn rule(i: usize, vip: u32, protocol: RuleProtocol, ports: PortRange) -> ForwardingRule {
    ForwardingRule {
        name: format!("r{i}"),
        vip: IpAddr::V4(Ipv4Addr::from(vip)),
        protocol,
        ports,
        service: ServiceId(i as u16),
        counter: i as u16,
    }
}

/// A VIP from a pool of `pool` addresses spread over the whole range (0
/// and u32::MAX included: the table must not care).
fn vip_of(k: u32, pool: u32) -> u32 {
    if k + 1 == pool {
        u32::MAX
    } else {
        k.wrapping_mul(0x0101_0101 / pool.max(1) * 97 + 1)
    }
}

fn arb_rules() -> impl Strategy<Value = (u32, Vec<ForwardingRule>)> {
    (1u32..48).prop_flat_map(|pool| {
        let one = (
            0..pool,
            prop_oneof![
                Just(RuleProtocol::Tcp),
                Just(RuleProtocol::Udp),
                Just(RuleProtocol::L3Default)
            ],
            prop_oneof![
                4 => (0u16..40, 0u16..8).prop_map(|(f, w)| PortRange { first: f, last: f.saturating_add(w) }),
                1 => Just(PortRange::ALL),
                1 => (0u16..40).prop_map(|f| PortRange { first: u16::MAX - f, last: u16::MAX }),
                1 => (0u16..40, 0u16..40).prop_map(|(a, b)| PortRange { first: a, last: b }),
            ],
        );
        (
            Just(pool),
            proptest::collection::vec(one, 0..160).prop_map(move |rs| {
                rs.into_iter()
                    .enumerate()
                    .map(|(i, (k, p, mut ports))| {
                        if p == RuleProtocol::L3Default {
                            ports = PortRange::ALL;
                        }
                        rule(i, vip_of(k, pool), p, ports)
                    })
                    .collect()
            }),
        )
    })
}

fn check(rules: &[ForwardingRule], t: &RuleTable, dst: u32, proto: u8, port: u16) {
    let want = reference(rules, dst, proto, port);
    let fast = t.lookup_v4_ports(dst, proto, port).map(|r| r.name.clone());
    let general = t
        .lookup(IpAddr::V4(Ipv4Addr::from(dst)), proto, Some(port))
        .map(|r| r.name.clone());
    assert_eq!(fast, want, "fast path: {dst:#x} proto {proto} port {port}");
    assert_eq!(general, want, "lookup: {dst:#x} proto {proto} port {port}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random tables (overlaps included: the first in config order wins),
    /// random packets to their VIPs and to addresses around them.
    #[test]
    fn fast_path_matches_the_plain_search(
        (pool, rules) in arb_rules(),
        packets in proptest::collection::vec(
            (0u32..64, prop_oneof![Just(6u8), Just(17u8), Just(1u8), Just(50u8)],
             prop_oneof![0u16..50, (u16::MAX - 45)..=u16::MAX, any::<u16>()],
             -1i64..=1),
            1..64),
    ) {
        let t = RuleTable::new(rules.clone());
        for (k, proto, port, off) in packets {
            let dst = (i64::from(vip_of(k % pool, pool)) + if k < pool { 0 } else { off }) as u32;
            check(&rules, &t, dst, proto, port);
        }
        prop_assert_eq!(t.rules().count(), rules.len());
    }
}

/// The benchmark's shape (`EXTRA_VIPS`, `RULES_PER_VIP`): 10,000 VIPs of
/// 10 rules each, every port of each probed near its rules.
#[test]
fn ten_thousand_vips_of_ten_rules() {
    let mut rules = Vec::new();
    let vip = |i: u32| {
        if i < 5_000 {
            0x6440_0001 + i
        } else {
            0xCB00_7201 + i - 5_000
        }
    };
    for i in 0..10_000u32 {
        for j in 0..10u16 {
            let n = rules.len();
            let proto = if j % 2 == 0 {
                RuleProtocol::Tcp
            } else {
                RuleProtocol::Udp
            };
            rules.push(rule(
                n,
                vip(i),
                proto,
                PortRange {
                    first: 8000 + j,
                    last: 8000 + j,
                },
            ));
        }
    }
    let t = RuleTable::new(rules.clone());
    for i in (0..10_000u32).step_by(37).chain([0, 4_999, 5_000, 9_999]) {
        for port in 7998..8012 {
            for proto in [6, 17, 1] {
                check(&rules, &t, vip(i), proto, port);
            }
        }
        check(&rules, &t, vip(i) ^ 0x8000_0000, 6, 8000);
    }
}
