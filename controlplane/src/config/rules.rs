//! Validation of `[[forwarding_rule]]` tables, including FR-2 overlaps.

use super::context::Ctx;
use super::model::*;
use super::raw::*;
use super::values;

pub(crate) fn rules_section(
    cx: &mut Ctx<'_>,
    rules: &[RawRule],
    services: &[RawService],
    ports: &[PortConfig],
) -> Vec<ForwardingRuleConfig> {
    cx.unique(rules.iter().map(|r| &r.name), "forwarding_rule");
    let mut out: Vec<(ForwardingRuleConfig, usize)> = Vec::new();
    for r in rules {
        cx.name(&r.name, "forwarding_rule");
        let at = format!("forwarding_rule {:?}", r.name.get_ref());
        let vip = cx.parse(&r.vip, &format!("{at}.vip"), values::ip);
        if let Some(v) = vip {
            if let Some(what) = super::addresses::special_purpose(v) {
                cx.err(
                    r.vip.span(),
                    &format!("{at}.vip"),
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
                    &format!("{at}.vip"),
                    (
                        format!("VIP {v} is the address of port {:?}", p.name),
                        "use a VIP distinct from the appliance's own port addresses".into(),
                    ),
                );
            }
        }
        let protocol = r
            .protocol
            .as_ref()
            .and_then(|p| {
                cx.parse(p, &format!("{at}.protocol"), |s| {
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
            .unwrap_or(RuleProtocol::Tcp);
        let ports_path = format!("{at}.ports");
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
                        cx.err(p.span(), &ports_path, e);
                        None
                    }
                }
            }
        };
        if protocol == RuleProtocol::L3Default && range.is_some_and(|r| !r.is_all()) {
            let span = r.ports.as_ref().map_or(r.name.span(), |p| p.span());
            cx.err(
                span,
                &ports_path,
                (
                    "an L3_DEFAULT rule must cover all ports".into(),
                    "set ports = \"ALL\" (or omit ports), or use protocol TCP/UDP for a port range"
                        .into(),
                ),
            );
        }
        let svc_name = r.backend_service.get_ref();
        let service = services.iter().position(|s| s.name.get_ref() == svc_name);
        if service.is_none() {
            let known: Vec<String> = services
                .iter()
                .map(|s| format!("{:?}", s.name.get_ref()))
                .collect();
            cx.err(
                r.backend_service.span(),
                &format!("{at}.backend_service"),
                (
                    format!("no backend_service named {svc_name:?}"),
                    if known.is_empty() {
                        "define it in a [[backend_service]] table".into()
                    } else {
                        format!("use one of {} or define it", known.join(", "))
                    },
                ),
            );
        }
        let (Some(vip), Some(ports)) = (vip, range) else {
            continue;
        };
        let rule = ForwardingRuleConfig {
            name: r.name.get_ref().clone(),
            vip,
            protocol,
            ports,
            backend_service: service.unwrap_or(0),
        };
        check_overlap(cx, &rule, r, &out);
        out.push((rule, r.name.span().start));
    }
    out.into_iter().map(|(r, _)| r).collect()
}

/// FR-2: one (VIP, protocol, port) belongs to at most one rule.
fn check_overlap(
    cx: &mut Ctx<'_>,
    rule: &ForwardingRuleConfig,
    raw: &RawRule,
    earlier: &[(ForwardingRuleConfig, usize)],
) {
    let proto_overlap = |a: RuleProtocol, b: RuleProtocol| {
        a == b || a == RuleProtocol::L3Default || b == RuleProtocol::L3Default
    };
    for (other, off) in earlier {
        if other.vip == rule.vip
            && proto_overlap(other.protocol, rule.protocol)
            && other.ports.overlaps(&rule.ports)
        {
            let (line, _) = cx.map.line_col(*off);
            let span = raw.ports.as_ref().map_or(raw.vip.span(), |p| p.span());
            cx.err(
                span,
                &format!("forwarding_rule {:?}", rule.name),
                (
                    format!(
                        "forwarding_rule {:?} overlaps forwarding_rule {:?} (line {line}): both claim {} {} ports {} (FR-2)",
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
            );
        }
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
