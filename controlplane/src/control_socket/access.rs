//! Who may use the control socket (AP-5): root, the user sluice runs as,
//! and the members of `--control-socket-group`. Checked on every
//! connection from its peer credentials (SO_PEERCRED: the uid and gid the
//! client had when it connected, which it cannot forge) before anything
//! it sends is read.

use std::path::Path;

/// A group from the local group database (`/etc/group`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub gid: u32,
}

impl Group {
    /// The group named `name` (or a numeric gid) in /etc/group, or why not
    /// (`--control-socket-group`).
    pub fn resolve(name: &str) -> Result<Group, String> {
        Self::resolve_in(name, Path::new("/etc/group"))
    }

    /// The group named `name` (or a numeric gid) in /etc/group, None when
    /// there is no such group (`--control-socket-group-if-exists`).
    pub fn resolve_if_exists(name: &str) -> Result<Option<Group>, String> {
        Self::lookup_in(
            "--control-socket-group-if-exists",
            name,
            Path::new("/etc/group"),
        )
    }

    fn resolve_in(name: &str, file: &Path) -> Result<Group, String> {
        Self::lookup_in("--control-socket-group", name, file)?.ok_or_else(|| {
            format!(
                "--control-socket-group {name}: no such group in {}; create it \
                 (groupadd {name}) or name an existing one",
                file.display()
            )
        })
    }

    fn lookup_in(option: &str, name: &str, file: &Path) -> Result<Option<Group>, String> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("{option} {name}: cannot read {}: {e}", file.display()))?;
        let found = text
            .lines()
            .filter_map(group_entry)
            .find(|(n, gid, _)| *n == name || name.parse::<u32>().is_ok_and(|g| g == *gid));
        Ok(match found {
            Some((n, gid, _)) => Some(Group {
                name: n.to_string(),
                gid,
            }),
            // A gid without a name is still a group the socket can have.
            None => name.parse::<u32>().ok().map(|gid| Group {
                name: name.to_string(),
                gid,
            }),
        })
    }
}

/// One line of /etc/group: name, gid, members.
fn group_entry(line: &str) -> Option<(&str, u32, Vec<&str>)> {
    let mut f = line.split(':');
    let name = f.next()?;
    let _password = f.next()?;
    let gid = f.next()?.trim().parse().ok()?;
    let members = f
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    Some((name, gid, members))
}

/// The name of `uid` in a passwd file's text.
fn user_name(passwd: &str, uid: u32) -> Option<&str> {
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _password = f.next()?;
        (f.next()?.trim().parse::<u32>().ok()? == uid).then_some(name)
    })
}

/// Who may use the socket.
#[derive(Clone, Debug)]
pub struct Access {
    /// The uid sluice runs as.
    pub own_uid: u32,
    pub group: Option<Group>,
}

impl Access {
    /// Root and sluice's own user, plus `group`'s members.
    pub fn new(group: Option<Group>) -> Access {
        Access {
            own_uid: rustix::process::getuid().as_raw(),
            group,
        }
    }

    /// Whether a client with these credentials may send requests, or the
    /// reply that refuses it. Group membership is the client's gid at
    /// connect time, or its user listed in the group (/etc/group read
    /// now: a member added since start is let in).
    pub fn check(&self, uid: u32, gid: u32) -> Result<(), String> {
        let member = |g: &Group| {
            gid == g.gid || {
                let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
                let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
                listed(&passwd, &groups, uid, g.gid)
            }
        };
        if uid == 0 || uid == self.own_uid || self.group.as_ref().is_some_and(member) {
            return Ok(());
        }
        Err(match &self.group {
            Some(g) => format!(
                "permission denied: uid {uid} is not root nor in group {}",
                g.name
            ),
            None => format!(
                "permission denied: uid {uid} is not root (the control socket has no \
                 --control-socket-group)"
            ),
        })
    }
}

/// `uid`'s user is listed as a member of group `gid`.
fn listed(passwd: &str, groups: &str, uid: u32, gid: u32) -> bool {
    let Some(user) = user_name(passwd, uid) else {
        return false;
    };
    groups
        .lines()
        .filter_map(group_entry)
        .any(|(_, g, members)| g == gid && members.contains(&user))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n\
                          bob:x:1001:1001::/home/bob:/bin/sh\n";
    const GROUPS: &str = "root:x:0:\nops:x:500:alice, carol\nbob:x:1001:\nbroken line\n";

    #[test]
    fn members_are_read_from_the_group_file() {
        assert!(listed(PASSWD, GROUPS, 1000, 500));
        assert!(!listed(PASSWD, GROUPS, 1001, 500));
        assert!(!listed(PASSWD, GROUPS, 4242, 500), "unknown uid");
        assert_eq!(user_name(PASSWD, 1001), Some("bob"));
        assert_eq!(group_entry("broken line"), None);
    }

    #[test]
    fn root_and_own_user_and_the_group_get_in_others_are_told_why_not() {
        let ops = Group {
            name: "ops".into(),
            gid: 500,
        };
        let a = Access {
            own_uid: 999,
            group: Some(ops),
        };
        assert!(a.check(0, 0).is_ok());
        assert!(a.check(999, 999).is_ok());
        assert!(a.check(4242, 500).is_ok(), "primary gid is the group");
        let e = a.check(4242, 4242).unwrap_err();
        assert_eq!(
            e,
            "permission denied: uid 4242 is not root nor in group ops"
        );
        let a = Access {
            own_uid: 0,
            group: None,
        };
        assert!(a
            .check(65534, 65534)
            .unwrap_err()
            .contains("uid 65534 is not root"));
    }

    #[test]
    fn groups_resolve_by_name_or_number() {
        let dir = std::env::temp_dir().join(format!("sluice-groups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("group");
        std::fs::write(&file, GROUPS).unwrap();
        let g = Group::resolve_in("ops", &file).unwrap();
        assert_eq!((g.name.as_str(), g.gid), ("ops", 500));
        assert_eq!(Group::resolve_in("500", &file).unwrap().name, "ops");
        assert_eq!(Group::resolve_in("7777", &file).unwrap().gid, 7777);
        let e = Group::resolve_in("nope", &file).unwrap_err();
        assert!(
            e.contains("no such group") && e.contains("groupadd nope"),
            "{e}"
        );
        let optional = "--control-socket-group-if-exists";
        assert_eq!(Group::lookup_in(optional, "nope", &file), Ok(None));
        assert_eq!(
            Group::lookup_in(optional, "ops", &file)
                .unwrap()
                .map(|g| g.gid),
            Some(500)
        );
        let e = Group::lookup_in(optional, "ops", &dir.join("missing")).unwrap_err();
        assert!(
            e.starts_with("--control-socket-group-if-exists ops: cannot read "),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
