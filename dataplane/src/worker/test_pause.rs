//! TEST HOOK, built only with the `test-hooks` feature: a worker that
//! stops polling RX after N packets until the next snapshot is published,
//! so a golden test knows exactly which packets saw which snapshot
//! (`sluice run --test-mark-unhealthy-after-packets`,
//! `--test-reload-after-packets`; see the controlplane's `test_hook.rs`).

/// When to pause, and the pause in progress.
#[derive(Debug, Default)]
pub struct TestPause {
    /// Pause once this many packets were received (None: never, or done).
    after_rx: Option<u64>,
    rx_seen: u64,
    /// The snapshot version the worker waits to see replaced.
    paused_at_version: Option<u64>,
}

impl TestPause {
    pub fn after_rx(packets: Option<u64>) -> Self {
        Self {
            after_rx: packets,
            ..Self::default()
        }
    }

    pub(super) fn received(&mut self, n: usize) {
        self.rx_seen += n as u64;
    }

    /// Whether this poll is skipped: once N packets were received, until
    /// the snapshot version moves past `version` as it was then.
    pub(super) fn holds(&mut self, version: u64) -> bool {
        if self.after_rx.is_some_and(|n| self.rx_seen >= n) {
            self.after_rx = None;
            self.paused_at_version = Some(version);
        }
        match self.paused_at_version {
            Some(v) if v == version => true,
            Some(_) => {
                self.paused_at_version = None;
                false
            }
            None => false,
        }
    }
}
