//! Putting the control socket at its path (AP-5) so that it is never
//! reachable with wider permissions than its own, whatever the umask: it
//! is bound in a fresh private (0700) directory next to the path, given
//! its mode and group there, then renamed onto the path. The umask is
//! left alone (it is process-wide, other threads create files).

use std::io;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::Group;

/// Why the control socket could not be put at its path.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Something other than a socket is there: never deleted.
    #[error(
        "--control-socket {}: {what}, not a socket: refusing to replace it; remove it \
         if nothing needs it, or give another path to --control-socket",
        path.display()
    )]
    NotASocket { path: PathBuf, what: &'static str },
    /// A socket there answers: another sluice runs.
    #[error("{}: another sluice answers there", path.display())]
    Live { path: PathBuf },
    #[error("{}: {step}: {source}", path.display())]
    Io {
        path: PathBuf,
        step: &'static str,
        source: io::Error,
    },
}

impl BindError {
    fn io<'a>(path: &'a Path, step: &'static str) -> impl FnOnce(io::Error) -> BindError + 'a {
        move |source| BindError::Io {
            path: path.to_path_buf(),
            step,
            source,
        }
    }
}

/// Whether `path` holds a stale socket (nobody answers: it may be
/// replaced); nothing there is `Ok(false)`. Anything else is refused.
pub fn check_path(path: &Path) -> Result<bool, BindError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(BindError::io(path, "cannot look at it")(e)),
    };
    let ft = meta.file_type();
    let what = if ft.is_socket() {
        None
    } else if ft.is_symlink() {
        Some("a symbolic link")
    } else if ft.is_dir() {
        Some("a directory")
    } else if ft.is_file() {
        Some("a regular file")
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else {
        Some("a device")
    };
    if let Some(what) = what {
        return Err(BindError::NotASocket {
            path: path.to_path_buf(),
            what,
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(BindError::Live {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(true),
        // A full backlog, or a socket we may not use: not ours to replace.
        Err(e) => Err(BindError::io(
            path,
            "a socket is there and whether a sluice answers cannot be told; remove it if \
             none runs",
        )(e)),
    }
}

/// Binds the control socket at `path`: mode 0600, or 0660 and group
/// `group`. Creates the missing directories (see [`create_private_dirs`]),
/// replaces a stale socket, refuses a live one or anything not a socket.
pub(super) fn bind(path: &Path, group: Option<&Group>) -> Result<UnixListener, BindError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    create_private_dirs(dir, group).map_err(BindError::io(dir, "cannot create the directory"))?;
    let stale = check_path(path)?;
    let private = private_dir(dir)?;
    let result = bind_in(&private, path, group, stale);
    let _ = std::fs::remove_file(private.join("s"));
    let _ = std::fs::remove_dir(&private);
    result
}

/// A new directory in `dir` only this process's user can enter.
fn private_dir(dir: &Path) -> Result<PathBuf, BindError> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Short: the socket's path inside it must fit sun_path (108 bytes).
        let d = dir.join(format!(".sl{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => {
                // The umask may have taken bits away, never added any.
                std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))
                    .map_err(BindError::io(&d, "cannot set its mode"))?;
                return Ok(d);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 64 => continue,
            Err(e) => return Err(BindError::io(&d, "cannot create a private directory")(e)),
        }
    }
}

fn bind_in(
    private: &Path,
    path: &Path,
    group: Option<&Group>,
    stale: bool,
) -> Result<UnixListener, BindError> {
    let inner = private.join("s");
    let listener = UnixListener::bind(&inner).map_err(BindError::io(path, "cannot bind"))?;
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(mode))
        .map_err(BindError::io(path, "cannot set the socket's mode"))?;
    if let Some(g) = group {
        let gid = rustix::fs::Gid::from_raw(g.gid);
        rustix::fs::chown(&inner, None, Some(gid)).map_err(|e| {
            BindError::io(
                path,
                "cannot give the socket its group (a group sluice's user is not in \
                     takes CAP_CHOWN)",
            )(e.into())
        })?;
    }
    let cwd = rustix::fs::CWD;
    let renamed = if stale {
        rustix::fs::rename(&inner, path)
    } else {
        // Nothing was there: whatever appeared since is not replaced.
        match rustix::fs::renameat_with(cwd, &inner, cwd, path, rustix::fs::RenameFlags::NOREPLACE)
        {
            // A file system without RENAME_NOREPLACE.
            Err(rustix::io::Errno::INVAL) => match check_path(path)? {
                false => rustix::fs::rename(&inner, path),
                true => Err(rustix::io::Errno::EXIST),
            },
            other => other,
        }
    };
    match renamed {
        Ok(()) => Ok(listener),
        Err(rustix::io::Errno::EXIST) => Err(BindError::io(
            path,
            "something appeared there while the socket was made; start again",
        )(io::ErrorKind::AlreadyExists.into())),
        Err(e) => Err(BindError::io(path, "cannot move the socket there")(
            e.into(),
        )),
    }
}

/// Creates `dir` and its missing ancestors whatever the umask: mode 0700,
/// or 0710 and `group` (its members may reach the socket, not list the
/// directory). Directories that already exist are left as they are (the
/// operator's).
pub fn create_private_dirs(dir: &Path, group: Option<&Group>) -> io::Result<()> {
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect();
    let mode = if group.is_some() { 0o710 } else { 0o700 };
    for d in missing.iter().rev() {
        match std::fs::DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => {
                if let Some(g) = group {
                    rustix::fs::chown(d, None, Some(rustix::fs::Gid::from_raw(g.gid)))?;
                }
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode))?;
            }
            // Created in between by someone else: not ours to change.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(name: &str) -> PathBuf {
        let base = std::env::temp_dir().join(format!("sluice-ctl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        base
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn created_directories_are_0700_and_existing_ones_untouched() {
        let base = base("dirs");
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let deep = base.join("a/b");
        create_private_dirs(&deep, None).unwrap();
        for d in [base.join("a"), deep.clone()] {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
        }
        assert_eq!(mode(&base), 0o755, "an existing directory keeps its mode");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn anything_but_a_socket_is_refused_and_kept() {
        let base = base("kinds");
        let file = base.join("file");
        std::fs::write(&file, "keep me").unwrap();
        std::os::unix::fs::symlink(&file, base.join("link")).unwrap();
        std::fs::create_dir(base.join("dir")).unwrap();
        for (name, what) in [
            ("file", "a regular file"),
            ("link", "a symbolic link"),
            ("dir", "a directory"),
        ] {
            let e = bind(&base.join(name), None).unwrap_err();
            assert!(
                matches!(e, BindError::NotASocket { what: w, .. } if w == what),
                "{name}: {e}"
            );
            assert!(e.to_string().contains("refusing to replace it"), "{e}");
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        let left: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
        assert_eq!(left.len(), 3, "no private directory left behind");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_stale_socket_is_replaced_a_live_one_refused() {
        let base = base("stale");
        let path = base.join("ctl.sock");
        drop(UnixListener::bind(&path).unwrap());
        assert!(check_path(&path).unwrap(), "stale");
        let live = bind(&path, None).unwrap();
        assert_eq!(mode(&path), 0o600);
        let e = bind(&path, None).unwrap_err();
        assert!(matches!(e, BindError::Live { .. }), "{e}");
        drop(live);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
