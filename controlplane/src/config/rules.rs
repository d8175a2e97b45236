//! Validation of `[[forwarding_rule]]` tables, including FR-2 overlaps.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use super::context::{name_index, names_listed, Ctx, Field, Named};
use super::model::*;
use super::overlap::{overlaps, Interval};
use super::raw::*;
use super::values;

pub(crate) fn rules_section(
    cx: &mut Ctx<'_>,
    rules: &[Box<RawRule>],
    services: &[Box<RawService>],
    ports: &[PortConfig],
    kept: &[Option<Arc<ForwardingRuleConfig>>],
) -> Vec<Arc<ForwardingRuleConfig>> {
    // Nothing offered: every check in full, names first (the order of
    // `check-config`'s errors at one place).
    if kept.is_empty() {
        cx.unique(rules.iter().map(|r| &r.name), "forwarding_rule");
    }
    // Built on the first rule validated here: a reload that changed one
    // rule of 100,000 looks its service up by position instead.
    let mut service_index = None;
    let mut out: Vec<(Arc<ForwardingRuleConfig>, &RawRule)> = Vec::with_capacity(rules.len());
    // Whether each rule of `out` was validated here (not kept).
    let mut fresh: Vec<bool> = Vec::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        if let Some(Some(k)) = kept.get(i) {
            // Kept only if its service is still where it points: the name
            // at that position is the rule's (a name used twice is refused
            // by the services' checks anyway).
            let same_service = services
                .get(k.backend_service)
                .is_some_and(|s| s.name.get_ref() == r.backend_service.get_ref());
            if same_service {
                out.push((Arc::clone(k), r));
                fresh.push(false);
                continue;
            }
        }
        let service_index =
            service_index.get_or_insert_with(|| name_index(services.iter().map(|s| &s.name)));
        if let Some(rule) = rule(cx, r, services, service_index, ports) {
            out.push((Arc::new(rule), r));
            fresh.push(true);
        }
    }
    let some_kept = fresh.contains(&false);
    let new_names = || {
        out.iter()
            .zip(&fresh)
            .filter(|(_, f)| **f)
            .map(|((_, r), _)| r)
    };
    // Kept rules come from one accepted configuration: their names were
    // unique and they did not overlap, so only rules validated here can
    // repeat a name or overlap (checked in full when one might).
    if !kept.is_empty() && (!some_kept || names_may_repeat(rules, new_names())) {
        cx.unique(rules.iter().map(|r| &r.name), "forwarding_rule");
    }
    check_overlaps(cx, &out, &fresh);
    out.into_iter().map(|(r, _)| r).collect()
}

/// One rule validated; None when it cannot be built (reported).
fn rule(
    cx: &mut Ctx<'_>,
    r: &RawRule,
    services: &[Box<RawService>],
    service_index: &ahash::AHashMap<&str, usize>,
    ports: &[PortConfig],
) -> Option<ForwardingRuleConfig> {
    let at = Named("forwarding_rule", r.name.get_ref());
    let vip = vip(cx, r, at, ports);
    let protocol = protocol(cx, r, at);
    let range = port_range(cx, r, at, protocol);
    let svc_name = r.backend_service.get_ref();
    let service = service_index.get(svc_name.as_str()).copied();
    if service.is_none() {
        cx.err(
            r.backend_service.span(),
            format_args!("{at}.backend_service"),
            (
                format!("no backend_service named {svc_name:?}"),
                if services.is_empty() {
                    "define it in a [[backend_service]] table".into()
                } else {
                    format!(
                        "use one of {} or define it",
                        names_listed(services.iter().map(|s| s.name.get_ref().as_str()))
                    )
                },
            ),
        );
    }
    Some(ForwardingRuleConfig {
        name: r.name.get_ref().clone(),
        vip: vip?,
        protocol,
        ports: range?,
        backend_service: service.unwrap_or(0),
    })
}

/// Whether a name of `new` (rules validated anew) is another rule's too.
fn names_may_repeat<'r>(
    rules: &[Box<RawRule>],
    new: impl Iterator<Item = &'r &'r RawRule>,
) -> bool {
    let mut names: ahash::AHashMap<&str, usize> = ahash::AHashMap::new();
    for r in new {
        *names.entry(r.name.get_ref().as_str()).or_default() += 1;
    }
    if names.values().any(|&n| n > 1) {
        return true;
    }
    // Each new name must occur once in the whole list: its own.
    let mut found = 0;
    for r in rules {
        if names.contains_key(r.name.get_ref().as_str()) {
            found += 1;
        }
    }
    found != names.len()
}

/// The rule's VIP: an address clients route to the appliance, not one of
/// its own.
fn vip(cx: &mut Ctx<'_>, r: &RawRule, at: Named<'_>, ports: &[PortConfig]) -> Option<IpAddr> {
    cx.name(&r.name, "forwarding_rule");
    let path = Field(at, "vip");
    let v = cx.parse(&r.vip, path, values::ip)?;
    if let Some(what) = super::addresses::special_purpose(v) {
        cx.err(
            r.vip.span(),
            path,
            (
                format!("VIP {v} is {what}"),
                "a VIP must be a unicast address clients route to the appliance: use \
                 a global or private unicast address"
                    .into(),
            ),
        );
    }
    if let Some(p) = ports.iter().find(|p| p.address_for(v) == Some(v)) {
        cx.err(
            r.vip.span(),
            path,
            (
                format!("VIP {v} is the address of port {:?}", p.name),
                "use a VIP distinct from the appliance's own port addresses".into(),
            ),
        );
    }
    Some(v)
}

fn protocol(cx: &mut Ctx<'_>, r: &RawRule, at: Named<'_>) -> RuleProtocol {
    r.protocol
        .as_ref()
        .and_then(|p| {
            cx.parse(p, format_args!("{at}.protocol"), |s| {
                values::choice(
                    s,
                    &[
                        ("TCP", RuleProtocol::Tcp),
                        ("UDP", RuleProtocol::Udp),
                        ("L3_DEFAULT", RuleProtocol::L3Default),
                    ],
                )
            })
        })
        .unwrap_or(RuleProtocol::Tcp)
}

/// The rule's ports (all when omitted); an L3_DEFAULT rule must take all.
fn port_range(
    cx: &mut Ctx<'_>,
    r: &RawRule,
    at: Named<'_>,
    protocol: RuleProtocol,
) -> Option<PortRange> {
    let ports_path = Field(at, "ports");
    let range = match &r.ports {
        None => Some(PortRange::ALL),
        Some(p) => {
            let text = match p.get_ref() {
                PortsValue::Int(i) => i.to_string(),
                PortsValue::Text(t) => t.clone(),
            };
            match values::port_range(&text) {
                Ok(r) => Some(r),
                Err(e) => {
                    cx.err(p.span(), ports_path, e);
                    None
                }
            }
        }
    };
    if protocol == RuleProtocol::L3Default && range.is_some_and(|r| !r.is_all()) {
        let span = r.ports.as_ref().map_or(r.name.span(), |p| p.span());
        cx.err(
            span,
            ports_path,
            (
                "an L3_DEFAULT rule must cover all ports".into(),
                "set ports = \"ALL\" (or omit ports), or use protocol TCP/UDP for a port range"
                    .into(),
            ),
        );
    }
    range
}

/// FR-2: one (VIP, protocol, port) belongs to at most one rule. Each rule
/// that claims what an earlier one does is reported once, naming the
/// earliest such rule and how many more it overlaps.
fn check_overlaps(
    cx: &mut Ctx<'_>,
    rules: &[(Arc<ForwardingRuleConfig>, &RawRule)],
    fresh: &[bool],
) {
    // Kept rules did not overlap one another: when some were kept, only
    // the VIPs of rules validated here can hold an overlap, and rules of
    // other VIPs are left out (overlaps are per VIP, so what is found is
    // what the whole list would give).
    let positions: Vec<usize> = if fresh.contains(&false) {
        let vips: HashSet<IpAddr> = rules
            .iter()
            .zip(fresh)
            .filter(|(_, f)| **f)
            .map(|((r, _), _)| r.vip)
            .collect();
        if vips.is_empty() {
            return;
        }
        (0..rules.len())
            .filter(|&i| vips.contains(&rules[i].0.vip))
            .collect()
    } else {
        (0..rules.len()).collect()
    };
    let configs: Vec<&ForwardingRuleConfig> = positions.iter().map(|&i| &*rules[i].0).collect();
    for (j, found) in overlapping_rules(&configs).into_iter().enumerate() {
        let Some(RuleOverlap { earliest, others }) = found else {
            continue;
        };
        let ((rule, raw), (other, other_raw)) = (&rules[positions[j]], &rules[positions[earliest]]);
        let line = cx.line_of(other_raw.name.span().start);
        let span = raw.ports.as_ref().map_or(raw.vip.span(), |p| p.span());
        cx.report(span, || {
            let more = match others - 1 {
                0 => String::new(),
                1 => "; 1 other rule overlaps it as well".into(),
                n => format!("; {n} other rules overlap it as well"),
            };
            (
                format!("forwarding_rule {:?}", rule.name),
                (
                    format!(
                        "forwarding_rule {:?} overlaps forwarding_rule {:?} (line {line}): both claim {} {} ports {} (FR-2){more}",
                        rule.name,
                        other.name,
                        proto_name(rule.protocol, other.protocol),
                        rule.vip,
                        shared_ports(&rule.ports, &other.ports),
                    ),
                    format!(
                        "give {:?} and {:?} disjoint port ranges or protocols, or merge them into one rule",
                        rule.name, other.name
                    ),
                ),
            )
        });
    }
}

/// A rule that overlaps an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RuleOverlap {
    /// The first rule it overlaps (earlier than it).
    earliest: usize,
    /// How many rules it overlaps, earlier or later.
    others: usize,
}

/// For each rule, whether it overlaps an earlier one (FR-2). Rules of one
/// VIP are compared per protocol lane: TCP rules with the TCP lane, UDP
/// with the UDP lane, and L3_DEFAULT ones, which claim every protocol, in
/// both. An L3_DEFAULT rule meets another one in both lanes, so a third
/// lane of L3_DEFAULT rules alone tells how often it was counted twice.
fn overlapping_rules(rules: &[&ForwardingRuleConfig]) -> Vec<Option<RuleOverlap>> {
    let mut by_vip: HashMap<IpAddr, Vec<usize>> = HashMap::new();
    for (i, r) in rules.iter().enumerate() {
        by_vip.entry(r.vip).or_default().push(i);
    }
    let mut earliest: Vec<Option<usize>> = vec![None; rules.len()];
    // Overlapping rules counted with their lane's sign, the rule included.
    let mut count: Vec<isize> = vec![0; rules.len()];
    for members in by_vip.values() {
        for (lane, sign) in [
            (Some(RuleProtocol::Tcp), 1),
            (Some(RuleProtocol::Udp), 1),
            (None, -1),
        ] {
            let in_lane: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&i| in_lane(rules[i].protocol, lane))
                .collect();
            let items: Vec<Interval> = in_lane
                .iter()
                .map(|&i| Interval {
                    lo: u128::from(rules[i].ports.first),
                    hi: u128::from(rules[i].ports.last),
                    group: i,
                })
                .collect();
            for (&i, o) in in_lane.iter().zip(overlaps(&items)) {
                count[i] += sign * o.count as isize;
                let found = o.earliest_other_group.map(|k| in_lane[k]);
                earliest[i] = first_of(earliest[i], found);
            }
        }
    }
    earliest
        .into_iter()
        .zip(count)
        .enumerate()
        .map(|(i, (first, count))| {
            first.filter(|&e| e < i).map(|e| RuleOverlap {
                earliest: e,
                others: count.unsigned_abs() - 1,
            })
        })
        .collect()
}

fn first_of(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        _ => a.or(b),
    }
}

/// Whether a rule of `protocol` is in a lane: the TCP or UDP lane
/// (`Some`), or the lane of L3_DEFAULT rules alone (`None`).
fn in_lane(protocol: RuleProtocol, lane: Option<RuleProtocol>) -> bool {
    match lane {
        Some(p) => protocol == p || protocol == RuleProtocol::L3Default,
        None => protocol == RuleProtocol::L3Default,
    }
}

fn proto_name(a: RuleProtocol, b: RuleProtocol) -> &'static str {
    match (a, b) {
        (RuleProtocol::Tcp, _) | (_, RuleProtocol::Tcp) => "TCP",
        (RuleProtocol::Udp, _) | (_, RuleProtocol::Udp) => "UDP",
        _ => "L3_DEFAULT",
    }
}

fn shared_ports(a: &PortRange, b: &PortRange) -> String {
    let first = a.first.max(b.first);
    let last = a.last.min(b.last);
    if first == 0 && last == u16::MAX {
        "ALL".into()
    } else if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(vip: u8, protocol: RuleProtocol, first: u16, last: u16) -> ForwardingRuleConfig {
        ForwardingRuleConfig {
            name: String::new(),
            vip: IpAddr::from([203, 0, 113, vip]),
            protocol,
            ports: PortRange { first, last },
            backend_service: 0,
        }
    }

    /// FR-2 as stated: same VIP, protocols equal or either L3_DEFAULT,
    /// port ranges intersecting.
    fn fr2(a: &ForwardingRuleConfig, b: &ForwardingRuleConfig) -> bool {
        let protocols = a.protocol == b.protocol
            || a.protocol == RuleProtocol::L3Default
            || b.protocol == RuleProtocol::L3Default;
        a.vip == b.vip && protocols && a.ports.overlaps(&b.ports)
    }

    /// The lanes agree with comparing every pair of rules: which rules
    /// overlap an earlier one, the first of them, and how many others.
    #[test]
    fn fr_2_lanes_agree_with_every_pair() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        let protocols = [
            RuleProtocol::Tcp,
            RuleProtocol::Udp,
            RuleProtocol::L3Default,
        ];
        for _ in 0..300 {
            let rules: Vec<ForwardingRuleConfig> = (0..1 + next(30))
                .map(|_| {
                    let (a, b) = (next(20) as u16, next(20) as u16);
                    let p = protocols[next(3) as usize];
                    rule(next(3) as u8, p, a.min(b), a.max(b))
                })
                .collect();
            let refs: Vec<&ForwardingRuleConfig> = rules.iter().collect();
            let want: Vec<Option<RuleOverlap>> = (0..rules.len())
                .map(|i| {
                    let others = |j: &usize| *j != i && fr2(&rules[i], &rules[*j]);
                    let earliest = (0..i).find(others)?;
                    Some(RuleOverlap {
                        earliest,
                        others: (0..rules.len()).filter(others).count(),
                    })
                })
                .collect();
            assert_eq!(overlapping_rules(&refs), want, "{rules:?}");
        }
    }
}
