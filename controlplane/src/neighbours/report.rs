//! What the log says about backends' next hops: the first resolution and
//! every MAC change (`next hop resolved`), the reason a next hop is not
//! usable, once per reason (`next hop unresolved`), and the loss of a
//! resolved one (`next hop lost`).

use std::collections::HashMap;
use std::net::IpAddr;

/// A backend's next hop as last logged.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Outcome {
    Resolved(Option<[u8; 6]>),
    Unresolved(String),
}

/// The line due when backend `addr`'s next hop goes from `before` to
/// `now`: (a warning, the text); None when nothing changed.
pub(super) fn line(
    addr: IpAddr,
    before: Option<&Outcome>,
    now: &Outcome,
) -> Option<(bool, String)> {
    if before == Some(now) {
        return None;
    }
    Some(match (before, now) {
        (_, Outcome::Resolved(mac)) => (
            false,
            format!(
                "sluice: backend {addr}: next hop resolved: {}",
                mac.map_or("-".into(), |m| crate::config::mac_text(&m))
            ),
        ),
        (Some(Outcome::Resolved(_)), Outcome::Unresolved(why)) => (
            true,
            format!("sluice: backend {addr}: next hop lost: {why}"),
        ),
        (_, Outcome::Unresolved(why)) => (
            true,
            format!("sluice: backend {addr}: next hop unresolved: {why}"),
        ),
    })
}

/// The last logged outcome of every backend.
#[derive(Default)]
pub(super) struct NextHopLog(HashMap<IpAddr, Outcome>);

impl NextHopLog {
    /// Logs `addr`'s outcome if it differs from the last logged one.
    pub(super) fn record(&mut self, addr: IpAddr, now: Outcome) {
        if let Some((warning, text)) = line(addr, self.0.get(&addr), &now) {
            if warning {
                crate::warn!("{text}");
            } else {
                crate::info!("{text}");
            }
            self.0.insert(addr, now);
        }
    }

    /// Forgets backends no longer resolved.
    pub(super) fn retain(&mut self, keep: impl Fn(&IpAddr) -> bool) {
        self.0.retain(|a, _| keep(a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first resolution is logged, a repeat is not, a MAC change is,
    /// a loss says "lost", a second reason is logged once.
    #[test]
    fn first_resolution_changes_and_loss_are_logged_once() {
        let a: IpAddr = "10.0.0.9".parse().unwrap();
        let up = Outcome::Resolved(Some([2, 0, 0, 0, 0, 1]));
        let why = |w: &str| Outcome::Unresolved(w.into());
        let text = |before: Option<&Outcome>, now: &Outcome| line(a, before, now);
        assert_eq!(
            text(None, &up),
            Some((
                false,
                "sluice: backend 10.0.0.9: next hop resolved: 02:00:00:00:00:01".into()
            ))
        );
        assert_eq!(text(Some(&up), &up), None);
        let moved = Outcome::Resolved(Some([2, 0, 0, 0, 0, 2]));
        assert!(text(Some(&up), &moved).is_some_and(|(w, t)| !w && t.ends_with("00:02")));
        let failed = why("next hop 10.0.0.9: neighbour state FAILED");
        assert_eq!(
            text(Some(&moved), &failed),
            Some((
                true,
                "sluice: backend 10.0.0.9: next hop lost: next hop 10.0.0.9: neighbour state FAILED"
                    .into()
            ))
        );
        assert_eq!(text(Some(&failed), &failed), None);
        let gone = why("next hop 10.0.0.9: no neighbour entry yet");
        assert!(text(Some(&failed), &gone)
            .is_some_and(|(w, t)| w && t.contains(": next hop unresolved: ")));
        assert!(text(None, &gone).is_some_and(|(_, t)| t.contains("next hop unresolved")));
    }
}
