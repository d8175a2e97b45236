//! `[bgp]`: announcing the VIPs to routers (AP-6) through BIRD 2 on the
//! appliance's kernel side. The validation of the raw tables (`raw.rs`)
//! into the model (`model.rs`), within what BIRD's syntax can carry
//! (`bird_syntax.rs`); `crate::announce::bird` renders the BIRD
//! configuration from it, `crate::announce` keeps the VIP routes BIRD
//! exports.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use super::bird_syntax;
use super::context::Ctx;
use super::model::{
    BfdConfig, BgpConfig, BgpPeer, Community, ForwardingRuleConfig, PortConfig, Secret,
    VipAnnouncement,
};
use super::raw::{RawBgp, RawPeer, RawVip};
use super::values::{self, Problem};

type S<T> = Spanned<T>;

/// Kernel routing tables that are not sluice's to fill.
const RESERVED_TABLES: [(u32, &str); 4] = [
    (0, "unspecified"),
    (253, "the kernel's default table"),
    (254, "the kernel's main table"),
    (255, "the kernel's local table"),
];

pub(crate) fn bgp_section(
    cx: &mut Ctx<'_>,
    raw: Option<&S<RawBgp>>,
    ports: &[PortConfig],
    rules: &[Arc<ForwardingRuleConfig>],
) -> Option<BgpConfig> {
    let raw = raw?;
    let b = raw.get_ref();
    let asn = match &b.asn {
        Some(v) => asn(cx, v, "bgp.asn"),
        None => {
            cx.err(
                raw.span(),
                "bgp.asn",
                (
                    "[bgp] has no asn".into(),
                    "add the appliance's AS number, e.g. `asn = 65001`".into(),
                ),
            );
            0
        }
    };
    let router_id = router_id(cx, raw, ports);
    let kernel_table = kernel_table(cx, &b.kernel_table);
    let hold_time = hold_time(cx, &b.hold_time);
    let bfd = b.bfd.unwrap_or(false).then(|| BfdConfig {
        interval: bounded(
            cx,
            &b.bfd_interval,
            Duration::from_millis(300),
            (Duration::from_millis(10), Duration::from_secs(10)),
            "bgp.bfd_interval",
        ),
        multiplier: cx.int(
            &b.bfd_multiplier,
            3u8,
            (1, 255),
            "bgp.bfd_multiplier",
            "bfd_multiplier",
        ),
    });
    if b.bfd != Some(true) {
        for (field, span) in [
            ("bfd_interval", b.bfd_interval.as_ref().map(|v| v.span())),
            (
                "bfd_multiplier",
                b.bfd_multiplier.as_ref().map(|v| v.span()),
            ),
        ] {
            if let Some(span) = span {
                cx.err(
                    span,
                    format!("bgp.{field}"),
                    (
                        format!("{field} is set but BFD is off"),
                        "add `bfd = true` to run BFD on every session, or remove the field".into(),
                    ),
                );
            }
        }
    }
    let drain_time = bounded(
        cx,
        &b.drain_time,
        Duration::from_secs(5),
        (Duration::ZERO, Duration::from_secs(3600)),
        "bgp.drain_time",
    );
    let stall_timeout = bounded(
        cx,
        &b.stall_timeout,
        Duration::from_secs(3),
        (Duration::from_millis(100), Duration::from_secs(60)),
        "bgp.stall_timeout",
    );
    if b.peer.is_empty() {
        cx.err(
            raw.span(),
            "bgp.peer",
            (
                "[bgp] has no peer".into(),
                "add a [[bgp.peer]] table per router: name, address, asn".into(),
            ),
        );
    }
    cx.unique(b.peer.iter().map(|p| &p.get_ref().name), "bgp.peer");
    protocol_names(cx, &b.peer);
    let peers = b.peer.iter().filter_map(|p| peer(cx, p, ports)).collect();
    let vips = vips(cx, &b.vip, rules);
    Some(BgpConfig {
        asn,
        router_id,
        kernel_table,
        hold_time,
        bfd,
        drain_time,
        stall_timeout,
        peers,
        vips,
    })
}

fn asn(cx: &mut Ctx<'_>, v: &S<i64>, path: &str) -> u32 {
    match values::int_in::<u32>(*v.get_ref(), 1, i64::from(u32::MAX), "an AS number") {
        Ok(a) => a,
        Err(p) => {
            cx.err(v.span(), path, p);
            0
        }
    }
}

fn router_id(cx: &mut Ctx<'_>, raw: &S<RawBgp>, ports: &[PortConfig]) -> Ipv4Addr {
    let first_v4 = ports.iter().find_map(|p| match p.ipv4?.addr {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    });
    match &raw.get_ref().router_id {
        Some(r) => cx
            .parse(r, "bgp.router_id", |s| match values::ip(s)? {
                IpAddr::V4(a) if !a.is_unspecified() => Ok(a),
                _ => Err((
                    format!("router id {s:?} is not a non-zero IPv4 address"),
                    "a BGP router id is written as an IPv4 address: use the appliance's \
                     IPv4 address, e.g. \"192.0.2.2\""
                        .into(),
                )),
            })
            .unwrap_or(Ipv4Addr::UNSPECIFIED),
        None if first_v4.is_some_and(|a| a.is_unspecified()) => {
            cx.err(
                raw.span(),
                "bgp.router_id",
                (
                    "the first IPv4 port address, which gives the BGP router id, is 0.0.0.0".into(),
                    "set `router_id = \"A.B.C.D\"` (a unique, non-zero 32-bit id written as \
                     an IPv4 address)"
                        .into(),
                ),
            );
            Ipv4Addr::UNSPECIFIED
        }
        None => first_v4.unwrap_or_else(|| {
            cx.err(
                raw.span(),
                "bgp.router_id",
                (
                    "no port has an IPv4 address to take the BGP router id from".into(),
                    "set `router_id = \"A.B.C.D\"` (a unique 32-bit id written as an IPv4 \
                     address)"
                        .into(),
                ),
            );
            Ipv4Addr::UNSPECIFIED
        }),
    }
}

fn kernel_table(cx: &mut Ctx<'_>, v: &Option<S<i64>>) -> u32 {
    let Some(v) = v else { return 100 };
    match values::int_in::<u32>(*v.get_ref(), 1, i64::from(u32::MAX), "kernel_table") {
        Ok(t) => {
            if let Some((_, what)) = RESERVED_TABLES.iter().find(|(n, _)| *n == t) {
                cx.err(
                    v.span(),
                    "bgp.kernel_table",
                    (
                        format!("table {t} is {what}"),
                        "give sluice a table of its own, e.g. `kernel_table = 100`: it \
                         replaces every route in it"
                            .into(),
                    ),
                );
            }
            t
        }
        Err(p) => {
            cx.err(v.span(), "bgp.kernel_table", p);
            100
        }
    }
}

fn hold_time(cx: &mut Ctx<'_>, v: &Option<S<String>>) -> u16 {
    let Some(v) = v else { return 9 };
    let parsed = cx.parse(v, "bgp.hold_time", |s| {
        let d = values::duration(s)?;
        let secs = d.as_secs();
        if d.subsec_millis() != 0 || !(secs == 0 || (3..=65535).contains(&secs)) {
            return Err((
                format!("hold time {s:?} is not 0 or a whole number of seconds from 3 to 65535"),
                "BGP counts the hold time in whole seconds, at least 3 (RFC 4271 §4.2): \
                 e.g. \"9s\"; with BFD, \"30s\" is enough"
                    .into(),
            ));
        }
        Ok(secs as u16)
    });
    parsed.unwrap_or(9)
}

fn bounded(
    cx: &mut Ctx<'_>,
    v: &Option<S<String>>,
    default: Duration,
    (lo, hi): (Duration, Duration),
    path: &str,
) -> Duration {
    let Some(v) = v else { return default };
    cx.parse(v, path, |s| {
        let d = values::duration(s)?;
        if d < lo || d > hi {
            return Err((
                format!(
                    "{s:?} is outside {} to {}",
                    values::show_duration(lo),
                    values::show_duration(hi)
                ),
                format!(
                    "use a duration from {} to {}",
                    values::show_duration(lo),
                    values::show_duration(hi)
                ),
            ));
        }
        Ok(d)
    })
    .unwrap_or(default)
}

fn peer(cx: &mut Ctx<'_>, p: &S<RawPeer>, ports: &[PortConfig]) -> Option<BgpPeer> {
    let p = p.get_ref();
    cx.name(&p.name, "bgp.peer");
    let at = format!("bgp.peer {:?}", p.name.get_ref());
    let peer_asn = asn(cx, &p.asn, &format!("{at}.asn"));
    let address = cx.parse(&p.address, format!("{at}.address"), values::ip)?;
    // The session runs from the appliance's kernel side: through the TAP
    // of the port whose subnet holds the peer.
    let Some(port) = ports
        .iter()
        .find(|port| port.tap.is_some() && port.on_link(address))
    else {
        let hint = match ports.iter().find(|port| port.on_link(address)) {
            Some(port) => format!(
                "the session runs from the kernel through the port's TAP: add \
                 `tap = \"<name>\"` to port {:?}",
                port.name
            ),
            None => "the session runs from the appliance's kernel through a port's TAP: \
                     give the peer's address on a port's subnet (`address`/`address6`)"
                .into(),
        };
        cx.err(
            p.address.span(),
            format!("{at}.address"),
            (
                format!("peer {address} is on no subnet of a port with a tap"),
                hint,
            ),
        );
        return None;
    };
    if port.address_for(address) == Some(address) {
        cx.err(
            p.address.span(),
            format!("{at}.address"),
            (
                format!(
                    "peer {address} is the appliance's own address on port {:?}",
                    port.name
                ),
                "give the router's address on that subnet".into(),
            ),
        );
        return None;
    }
    let password = p.password.as_ref().and_then(|pw| {
        let s = pw.get_ref();
        let problem = if s.is_empty() || s.len() > 80 {
            Some(format!(
                "the password is {} bytes long: a TCP MD5 key is 1 to 80 bytes",
                s.len()
            ))
        } else {
            s.char_indices()
                .find(|&(_, c)| !bird_syntax::fits_bird_string(c.encode_utf8(&mut [0; 4])))
                .map(|(i, c)| {
                    format!(
                        "the password holds {} at byte {i}, which the BIRD configuration \
                         cannot carry as it is",
                        shown_char(c)
                    )
                })
        };
        match problem {
            Some(message) => {
                cx.err(
                    pw.span(),
                    format!("{at}.password"),
                    (
                        message,
                        "use 1-80 bytes of printable characters other than `\"` and `\\` \
                         (the same key on the router)"
                            .into(),
                    ),
                );
                None
            }
            None => Some(Secret(s.clone())),
        }
    });
    let local = port.address_for(address)?;
    for (what, a) in [("peer", address), ("local", local)] {
        if a.is_unspecified() {
            let message = if what == "peer" {
                format!("peer {a} is the unspecified address")
            } else {
                format!(
                    "port {:?}'s address {a} is unspecified: the session has no source",
                    port.name
                )
            };
            cx.err(
                p.address.span(),
                format!("{at}.address"),
                (
                    message,
                    "give the router's address on a port's subnet, and the port an address \
                     of its own"
                        .into(),
                ),
            );
            return None;
        }
    }
    Some(BgpPeer {
        name: p.name.get_ref().clone(),
        address,
        asn: peer_asn,
        password,
        local,
        tap: port.tap.clone()?,
    })
}

/// Peers whose BIRD protocol names (`bird_syntax::protocol_name`) coincide
/// although their names differ: a long name is cut and ends in a hash of
/// the whole, which another peer's name can match.
fn protocol_names(cx: &mut Ctx<'_>, peers: &[S<RawPeer>]) {
    let mut seen: Vec<(String, &S<String>)> = Vec::new();
    for p in peers {
        let name = &p.get_ref().name;
        let protocol = bird_syntax::protocol_name(name.get_ref());
        match seen.iter().find(|(q, _)| *q == protocol) {
            Some((_, first)) if first.get_ref() != name.get_ref() => {
                let (line, _) = cx.map.line_col(first.span().start);
                cx.err(
                    name.span(),
                    format!("bgp.peer {:?}.name", name.get_ref()),
                    (
                        format!(
                            "peers {:?} (line {line}) and {:?} would both be BIRD protocol \
                             {protocol}",
                            first.get_ref(),
                            name.get_ref()
                        ),
                        format!(
                            "rename one of them: BIRD symbols are at most {} characters, \
                             so a name past {} is cut and ends in a hash",
                            bird_syntax::SYMBOL_MAX,
                            bird_syntax::SYMBOL_MAX - "sluice_".len()
                        ),
                    ),
                );
            }
            Some(_) => {}
            None => seen.push((protocol, name)),
        }
    }
}

/// How an error names a character it refuses: printable ones as
/// themselves, the others by code point.
fn shown_char(c: char) -> String {
    if c.is_control() {
        format!("the control character U+{:04X}", u32::from(c))
    } else {
        format!("{c:?}")
    }
}

fn vips(
    cx: &mut Ctx<'_>,
    raw: &[S<RawVip>],
    rules: &[Arc<ForwardingRuleConfig>],
) -> Vec<VipAnnouncement> {
    let mut out: Vec<(VipAnnouncement, usize)> = Vec::new();
    for (i, v) in raw.iter().enumerate() {
        let v = v.get_ref();
        let at = format!("bgp.vip[{i}]");
        let Some(vip) = cx.parse(&v.vip, format!("{at}.vip"), values::ip) else {
            continue;
        };
        if !rules.iter().any(|r| r.vip == vip) {
            cx.err(
                v.vip.span(),
                format!("{at}.vip"),
                (
                    format!("{vip} is the VIP of no forwarding rule"),
                    "give the `vip` of a [[forwarding_rule]], or remove this [[bgp.vip]]".into(),
                ),
            );
        }
        if let Some((_, first)) = out.iter().find(|(o, _)| o.vip == vip) {
            let (line, _) = cx.map.line_col(*first);
            cx.err(
                v.vip.span(),
                format!("{at}.vip"),
                (
                    format!("VIP {vip} has attributes already (line {line})"),
                    "merge its communities and med into one [[bgp.vip]]".into(),
                ),
            );
        }
        let communities = v
            .communities
            .iter()
            .enumerate()
            .filter_map(|(k, c)| cx.parse(c, format!("{at}.communities[{k}]"), community))
            .collect();
        let med = v.med.as_ref().and_then(|m| {
            match values::int_in::<u32>(*m.get_ref(), 0, i64::from(u32::MAX), "med") {
                Ok(x) => Some(x),
                Err(p) => {
                    cx.err(m.span(), format!("{at}.med"), p);
                    None
                }
            }
        });
        out.push((
            VipAnnouncement {
                vip,
                communities,
                med,
            },
            v.vip.span().start,
        ));
    }
    out.into_iter().map(|(v, _)| v).collect()
}

/// `ASN:VALUE` (16 bits each) or `GLOBAL:DATA1:DATA2` (32 bits each).
fn community(s: &str) -> Result<Community, Problem> {
    let bad = || {
        (
            format!("invalid community {s:?}"),
            "write a standard community as \"ASN:VALUE\" (0-65535 each, e.g. \"65000:100\") \
             or a large one as \"GLOBAL:DATA1:DATA2\" (0-4294967295 each)"
                .into(),
        )
    };
    let parts: Vec<&str> = s.trim().split(':').collect();
    match parts[..] {
        [a, b] => Ok(Community::Standard(
            a.parse().map_err(|_| bad())?,
            b.parse().map_err(|_| bad())?,
        )),
        [a, b, c] => Ok(Community::Large(
            a.parse().map_err(|_| bad())?,
            b.parse().map_err(|_| bad())?,
            c.parse().map_err(|_| bad())?,
        )),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn communities_standard_and_large() {
        assert_eq!(community("65000:100"), Ok(Community::Standard(65000, 100)));
        assert_eq!(community("1:2:3"), Ok(Community::Large(1, 2, 3)));
        assert!(community("65536:1").is_err());
        assert!(community("1:2:3:4").is_err());
        assert!(community("x").is_err());
        assert_eq!(
            Community::Large(4_200_000_000, 1, 2).to_string(),
            "4200000000:1:2"
        );
    }

    #[test]
    fn a_password_is_not_shown() {
        assert_eq!(
            format!("{:?}", Secret("hunter2".into())),
            "Secret(<hidden>)"
        );
    }
}
