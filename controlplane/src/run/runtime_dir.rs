//! EAL's runtime directory, removed after EAL's cleanup.

/// EAL's runtime directory (`/var/run/dpdk/<prefix>` for root, else under
/// `$XDG_RUNTIME_DIR` or `/tmp`), which EAL creates at init and leaves
/// behind (megabytes of memseg files with hugepages), removed when this is
/// dropped: after EAL's cleanup, on success and failure alike. The
/// per-process prefix sluice adds is always ours; an operator's
/// `--file-prefix` only once EAL init succeeded (a failed init may mean
/// another primary process holds it).
pub struct RuntimeDir {
    path: Option<std::path::PathBuf>,
    ours: bool,
}

impl RuntimeDir {
    pub fn of(args: &[String]) -> Self {
        let own = format!("sluice-{}", std::process::id());
        let prefix = args
            .iter()
            .zip(args.iter().skip(1).map(Some).chain([None]))
            .filter_map(|(a, next)| match a.strip_prefix("--file-prefix=") {
                Some(p) => Some(p.to_string()),
                None if a == "--file-prefix" => next.cloned(),
                None => None,
            })
            .last();
        let base = if rustix::process::getuid().is_root() {
            std::path::PathBuf::from("/var/run")
        } else {
            std::env::var_os("XDG_RUNTIME_DIR")
                .map_or_else(|| "/tmp".into(), std::path::PathBuf::from)
        };
        Self {
            ours: prefix.as_deref() == Some(own.as_str()),
            path: prefix.map(|p| base.join("dpdk").join(p)),
        }
    }

    /// EAL init succeeded: this process is the directory's primary.
    pub fn initialised(&mut self) {
        self.ours = self.path.is_some();
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        if let (true, Some(path)) = (self.ours, &self.path) {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}
