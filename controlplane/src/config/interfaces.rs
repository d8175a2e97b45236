//! Kernel interface names of the ports' TAPs (AP-4): what the kernel
//! accepts (`dev_valid_name`: 1 to IFNAMSIZ − 1 = 15 bytes, no '/', ':'
//! or white space, not "." or ".."), minus names that are always taken or
//! would collide with the kernel's own per-interface directories, and one
//! TAP per name. Whether the name is free on the host is decided by
//! `sluice run` (the file may be checked on another machine).

use toml::Spanned;

use super::context::Ctx;

/// Longest interface name (IFNAMSIZ − 1).
pub(crate) const MAX_IFNAME: usize = 15;

/// Names never usable for a TAP: the loopback interface, and the
/// `/proc/sys/net/*/conf/{all,default}` entries an interface of that name
/// would collide with.
const RESERVED: [&str; 3] = ["lo", "all", "default"];

/// The TAP name of a port, or None (recorded) when it is unusable.
pub(crate) fn tap_name(cx: &mut Ctx<'_>, t: &Spanned<String>, at: &str) -> Option<String> {
    let name = t.get_ref();
    let problem = if name.is_empty()
        || name.len() > MAX_IFNAME
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || name == "."
        || name == ".."
    {
        Some((
            format!("{name:?} is not a usable interface name"),
            format!(
                "give 1-{MAX_IFNAME} characters of letters, digits, '-', '_' or '.' \
                 (e.g. \"sl-uplink\")"
            ),
        ))
    } else if RESERVED.contains(&name.as_str()) {
        Some((
            format!("{name:?} is a reserved interface name"),
            format!(
                "choose a name of your own (e.g. \"sl-uplink\"); {} are taken by the kernel",
                RESERVED.map(|r| format!("{r:?}")).join(", ")
            ),
        ))
    } else {
        None
    };
    match problem {
        Some(p) => {
            cx.err(t.span(), format!("{at}.tap"), p);
            None
        }
        None => Some(name.clone()),
    }
}

/// Records a TAP name used by two ports (the second would attach to the
/// first's interface).
pub(crate) fn unique_taps<'a>(
    cx: &mut Ctx<'_>,
    taps: impl Iterator<Item = (&'a str, &'a Spanned<String>)>,
) {
    let mut seen: Vec<(&str, &str, usize)> = Vec::new();
    for (port, t) in taps {
        if let Some((first, _, off)) = seen.iter().find(|(_, n, _)| *n == t.get_ref()) {
            let (line, _) = cx.map.line_col(*off);
            let msg = format!(
                "TAP {:?} is also the TAP of port {first:?} (line {line})",
                t.get_ref()
            );
            cx.err(
                t.span(),
                format!("dataplane.port {port:?}.tap"),
                (msg, "give each port's TAP its own name".into()),
            );
        } else {
            seen.push((port, t.get_ref(), t.span().start));
        }
    }
}
