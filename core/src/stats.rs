//! Per-worker counters: one writer (the worker), any number of readers (the
//! metrics scrape), no locked read-modify-write on the packet path.
//!
//! A [`Counter`] is an `AtomicU64` updated with a relaxed load + store: only
//! its owning worker writes it, so the pair cannot lose an update, and it
//! compiles to a plain `add` on x86. Readers may see a value one burst old.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::drop_reason::DropReason;
use crate::ids::BackendId;

/// Maximum number of dataplane ports.
pub const MAX_PORTS: usize = 8;

/// A single-writer monotonically increasing counter.
#[derive(Debug, Default, bytemuck::Zeroable)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Must only be called by the counter's owning thread.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Per-backend counters of one worker: one for every index a
/// [`BackendId`] can have (2²⁰, 32 MiB of address space), in a single
/// zeroed allocation. The kernel maps the pages of a zeroed allocation
/// that size only when they are first written, so a worker's memory grows
/// by a 4 KiB page per 128 indexes in use, and the worker never allocates.
/// A packet's counter is its index's place in the array: no lookup and no
/// bounds check (an index is below [`BackendId::INDEXES`] by its type).
#[derive(Debug)]
pub struct BackendCounters {
    counters: Box<[BackendCounter; BackendId::INDEXES]>,
}

/// One backend's packets, bytes and new connections, 32 bytes: packets
/// and bytes, the two every packet adds to, share a 16-byte-aligned half,
/// so they are always in one cache line. Aligned to 16, not 32: the
/// allocator zeroes an allocation aligned beyond 16 by writing it, which
/// would make the whole array resident (`core/tests/backend_counters.rs`).
#[derive(Debug, bytemuck::Zeroable)]
#[repr(C, align(16))]
pub(crate) struct BackendCounter {
    packets: Counter,
    bytes: Counter,
    connections: Counter,
}

const _: () = assert!(
    std::mem::size_of::<BackendCounter>() == 32 && std::mem::align_of::<BackendCounter>() == 16
);

impl Default for BackendCounters {
    fn default() -> Self {
        Self {
            counters: bytemuck::allocation::zeroed_box(),
        }
    }
}

impl BackendCounters {
    #[inline(always)]
    fn counter(&self, index: usize) -> Option<&BackendCounter> {
        self.counters.get(index)
    }

    /// Adds `packets` and `bytes` to `id`'s index, and one new connection
    /// when `opened` (owning worker only).
    #[inline(always)]
    pub(crate) fn add(&self, id: BackendId, packets: u64, bytes: u64, opened: bool) {
        if let Some(c) = self.counter(id.index()) {
            c.packets.add(packets);
            c.bytes.add(bytes);
            if opened {
                c.connections.add(1);
            }
        }
    }

    /// Packets counted for `index`.
    pub fn get(&self, index: usize) -> u64 {
        self.counter(index).map_or(0, |c| c.packets.get())
    }

    /// Bytes counted for `index`.
    pub fn bytes(&self, index: usize) -> u64 {
        self.counter(index).map_or(0, |c| c.bytes.get())
    }

    /// New connections counted for `index`.
    pub fn connections(&self, index: usize) -> u64 {
        self.counter(index).map_or(0, |c| c.connections.get())
    }

    /// Zeroes `index` before it is given to another backend. Only once no
    /// published snapshot names the index any more: its worker no longer
    /// writes it, and the snapshot that hands it out again is published
    /// (release) after this store, so the worker's next add sees zero.
    pub fn reset(&self, index: usize) {
        if let Some(c) = self.counter(index) {
            c.packets.0.store(0, Ordering::Relaxed);
            c.bytes.0.store(0, Ordering::Relaxed);
            c.connections.0.store(0, Ordering::Relaxed);
        }
    }
}

/// Packets per forwarding rule of one worker, by the rule's counter slot
/// (`ForwardingRule::counter`). The control plane gives each rule name a
/// slot of its own for the life of the process (a rule removed and added
/// again gets its slot back), so a rule's count only rises, across
/// reloads too. One counter for every `u16` (512 KiB per worker), all
/// there from the start: the worker never allocates, and its index needs
/// no bounds check. A rule without a slot of its own (more names than
/// slots) has [`RuleCounters::NONE`], counted apart (`uncounted`).
#[derive(Debug)]
pub struct RuleCounters {
    slots: Box<[Counter; Self::SLOTS + 1]>,
}

impl RuleCounters {
    /// Slots a rule can have: every `u16` but [`RuleCounters::NONE`].
    pub const SLOTS: usize = u16::MAX as usize;
    /// The slot of a rule that has none of its own.
    pub const NONE: u16 = u16::MAX;

    /// Adds one packet to `slot` (owning worker only).
    #[inline(always)]
    pub fn add(&self, slot: u16) {
        self.slots[usize::from(slot)].add(1);
    }

    /// Adds `n` packets to `slot` (owning worker only): a run of packets
    /// counted at once.
    #[inline(always)]
    pub(crate) fn add_n(&self, slot: u16, n: u64) {
        self.slots[usize::from(slot)].add(n);
    }

    /// Packets counted for `slot`.
    pub fn get(&self, slot: u16) -> u64 {
        self.slots[usize::from(slot)].get()
    }

    /// Packets of rules without a slot of their own.
    // Public for core/tests/established.rs.
    pub fn uncounted(&self) -> u64 {
        self.get(Self::NONE)
    }
}

impl Default for RuleCounters {
    fn default() -> Self {
        let slots: Box<[Counter]> = (0..=Self::SLOTS).map(|_| Counter::default()).collect();
        match slots.try_into() {
            Ok(slots) => Self { slots },
            Err(_) => unreachable!("SLOTS + 1 counters collected"),
        }
    }
}

/// A single-writer gauge (last value wins).
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    #[inline(always)]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// How a declared number is exported.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Export {
    /// A Prometheus counter: the sum over every worker.
    Total,
    /// A Prometheus counter with one series per worker (`worker="i"`).
    WorkerCounter,
    /// A Prometheus gauge with one series per worker (`worker="i"`).
    WorkerGauge,
}

/// A label name and value fixed for one series of a family.
pub(crate) type FixedLabel = Option<(&'static str, &'static str)>;

/// One exported number of a counter block `B`: its metric family, help
/// text, optional fixed label within the family, and how to read it. The
/// block's declaration ([`counter_block!`]) makes these, so the metrics
/// endpoint needs no list of its own.
#[derive(Debug)]
pub struct Metric<B: 'static> {
    pub name: &'static str,
    /// The field's doc comment, one entry per line (see [`Metric::help`]).
    pub(crate) doc: &'static [&'static str],
    /// A label fixed for this series, e.g. `("direction", "out")`: several
    /// fields then make one family.
    pub label: FixedLabel,
    pub export: Export,
    pub read: fn(&B) -> u64,
}

impl<B> Metric<B> {
    /// The help text: the doc comment's lines joined by spaces.
    pub fn help(&self) -> String {
        let mut out = String::new();
        for line in self.doc {
            let line = line.trim();
            if !line.is_empty() {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(line);
            }
        }
        out
    }
}

/// Declares a block of single-writer numbers once: the struct (each field
/// documented by its doc comment), its `Default`, and `B::METRICS`, the
/// exported metric of every field, whose help text is that same doc
/// comment. A new counter is one field here; the worker bumps it and the
/// metrics endpoint exports it with no other change.
///
/// ```text
/// /// Help text and field doc.
/// field: Counter => Total "metric_name" { label = "value" },   // label optional
/// ```
///
/// Fields after `;` are part of the struct but not exported by the block
/// itself (arrays and tables the endpoint labels on its own).
macro_rules! counter_block {
    (
        $(#[doc = $sdoc:literal])*
        pub(crate) struct $block:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident: $ty:ident => $export:ident $metric:literal
                    $({ $lname:literal = $lvalue:literal })?,
            )*
            $(;
                $(
                    $(#[doc = $odoc:literal])*
                    $ofield:ident: $oty:ty,
                )*
            )?
        }
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Default)]
        pub struct $block {
            $($(#[doc = $doc])* pub $field: $ty,)*
            $($($(#[doc = $odoc])* pub $ofield: $oty,)*)?
        }

        impl $block {
            /// Every exported field, in declaration order.
            pub const METRICS: &'static [Metric<$block>] = &[
                $(Metric {
                    name: $metric,
                    doc: &[$($doc),*],
                    label: counter_block!(@label $($lname, $lvalue)?),
                    export: Export::$export,
                    read: |b: &$block| b.$field.get(),
                },)*
            ];
        }
    };
    (@label) => { None };
    (@label $name:literal, $value:literal) => { Some(($name, $value)) };
}

counter_block! {
    /// One port's counters in one worker; exported with a `port` label.
    pub(crate) struct PortCounters {
        /// Packets received on a dataplane port.
        rx_packets: Counter => Total "sluice_port_rx_packets_total",
        /// Bytes received on a dataplane port.
        rx_bytes: Counter => Total "sluice_port_rx_bytes_total",
        /// Frames sent on a dataplane port; each IP fragment counts (see
        /// sluice_fragments_created_total).
        tx_packets: Counter => Total "sluice_port_tx_packets_total",
        /// Bytes sent on a dataplane port.
        tx_bytes: Counter => Total "sluice_port_tx_bytes_total",
        /// Packets received on a port for the appliance itself and handed to
        /// its TAP. Per port, RX = TX + punted + drops.
        punted: Counter => Total "sluice_port_punted_packets_total",
        /// Packets the kernel sent on a port's TAP and the port transmitted;
        /// not in tx_packets.
        injected: Counter => Total "sluice_port_injected_packets_total",
        /// Packets the kernel sent on a port's TAP that the port's TX queue
        /// refused.
        inject_failed: Counter => Total "sluice_port_inject_failed_packets_total",
    }
}

counter_block! {
    /// The worker's conntrack shard as the scrape sees it (SPEC §3). The
    /// shard counts in plain worker-local integers; the worker copies them
    /// here once per poll ([`ConntrackStats::publish`]), so the event
    /// counts are monotonic and exported summed over workers, while
    /// occupancy and size are gauges per worker.
    pub(crate) struct ConntrackStats {
        /// Occupied conntrack slots per worker (expired ones not yet swept
        /// included).
        entries: Gauge => WorkerGauge "sluice_conntrack_entries",
        /// Connections each worker's conntrack shard is sized to hold
        /// (conntrack_capacity).
        capacity: Gauge => WorkerGauge "sluice_conntrack_capacity",
        /// Conntrack slots reserved per worker (1.25 x capacity rounded up
        /// to a power of two; 68 bytes each).
        slots: Gauge => WorkerGauge "sluice_conntrack_slots",
        /// Conntrack entries created.
        inserts: Gauge => Total "sluice_conntrack_inserts_total",
        /// Tracked packets that found a live entry.
        hits: Gauge => Total "sluice_conntrack_hits_total",
        /// Tracked packets that found no live entry (new or expired flows).
        misses: Gauge => Total "sluice_conntrack_misses_total",
        /// Entries reclaimed after their idle timeout.
        expirations: Gauge => Total "sluice_conntrack_expirations_total",
        /// New flows not recorded because their slots were all live and
        /// none half-open (table full); forwarded by Maglev.
        insert_failed: Gauge => Total "sluice_conntrack_insert_failed_total",
        /// Half-open (SYN-only) entries replaced by a new flow in a full
        /// part of the table.
        half_open_evicted: Gauge => Total "sluice_conntrack_half_open_evictions_total",
        /// Tracked packets moved off a backend that became unhealthy.
        reselected_unhealthy: Gauge => Total "sluice_conntrack_reselected_unhealthy_total",
    }
}

impl ConntrackStats {
    /// Copies the shard's counters (one owner: the worker).
    #[inline]
    pub fn publish(&self, shard: &crate::conntrack::Shard) {
        let c = &shard.counters;
        self.entries.set(shard.len() as u64);
        self.capacity.set(shard.capacity() as u64);
        self.slots.set(shard.slots() as u64);
        self.inserts.set(c.inserts);
        self.hits.set(c.hits);
        self.misses.set(c.misses);
        self.expirations.set(c.expirations);
        self.insert_failed.set(c.insert_failed);
        self.half_open_evicted.set(c.half_open_evicted);
        self.reselected_unhealthy.set(c.reselected_unhealthy);
    }
}

counter_block! {
    /// UDP packets of QUIC-LB services as one worker decided them. The
    /// pipeline counts in plain worker-local integers
    /// ([`crate::quic_lb::QuicLbCounts`]); the worker copies them here once
    /// per poll ([`QuicLbStats::publish`]).
    pub(crate) struct QuicLbStats {
        /// UDP packets of QUIC-LB services sent to the backend their QUIC
        /// connection ID names, whatever their addresses and ports.
        routed: Gauge => Total "sluice_quic_lb_routed_packets_total",
        ;
        /// Sent the ordinary path, by [`crate::quic_lb::Fallback::index`]
        /// (exported with a `reason` label).
        fallback: [Gauge; crate::quic_lb::Fallback::COUNT],
    }
}

impl QuicLbStats {
    /// Copies the pipeline's counts (one owner: the worker).
    #[inline]
    pub fn publish(&self, counts: &crate::quic_lb::QuicLbCounts) {
        self.routed.set(counts.routed);
        for (gauge, &n) in self.fallback.iter().zip(&counts.fallback) {
            gauge.set(n);
        }
    }
}

counter_block! {
    /// Everything one worker counts. Allocated once at start; the metrics
    /// thread holds an `Arc` to every worker's block and sums them at
    /// scrape time.
    pub(crate) struct WorkerStats {
        /// Tracked packets moved between workers so that one worker's shard
        /// sees every packet of a tracking key (ports without RSS on
        /// addresses only).
        steered_out: Counter => Total "sluice_steered_packets_total" { "direction" = "out" },
        /// Tracked packets moved between workers so that one worker's shard
        /// sees every packet of a tracking key (ports without RSS on
        /// addresses only).
        steered_in: Counter => Total "sluice_steered_packets_total" { "direction" = "in" },
        /// RX polls a worker skipped because a peer's steering ring was
        /// full: the packets waited in the port's RX queue instead of being
        /// dropped between workers. Rising steadily: the owning workers
        /// cannot keep up (watch sluice_port_hw_rx_missed_packets_total and
        /// sluice_port_kernel_drops_total).
        steering_backpressure: Counter => Total "sluice_steering_backpressure_total",
        /// ICMP fragmentation-needed / ICMPv6 packet-too-big answers sent
        /// to clients whose packet exceeds the path MTU. The answer replaces
        /// the packet it answers, so it counts in TX.
        icmp_replies: Counter => Total "sluice_icmp_replies_total",
        /// Received packets sent on as IP fragments (oversize IPv4 without
        /// DF). RX = TX + punted + drops - (fragments created -
        /// packets fragmented).
        fragmented: Counter => Total "sluice_fragmented_packets_total",
        /// Fragments made of them, each then counted in
        /// sluice_port_tx_packets_total or as a tx_queue_full drop.
        fragments: Counter => Total "sluice_fragments_created_total",
        /// Poll-loop iterations (RX bursts attempted), per worker: a worker
        /// whose count stops rising is stuck.
        polls: Counter => WorkerCounter "sluice_worker_polls_total",
        /// Poll-loop iterations that found nothing to do (no packet received,
        /// steered in or injected), per worker; the others are busy polls.
        idle_polls: Counter => WorkerCounter "sluice_worker_idle_polls_total",
        /// Sleeps after idle polls under adaptive idle polling (dataplane.idle
        /// = "adaptive"), per worker; each lasts at most idle_sleep_max_us.
        idle_sleeps: Counter => WorkerCounter "sluice_worker_idle_sleeps_total",
        /// Generation of the forwarding snapshot each worker last loaded:
        /// one lagging behind sluice_snapshot_generation has not picked up
        /// the latest publish.
        snapshot_generation: Gauge => WorkerGauge "sluice_worker_snapshot_generation",
        ;
        ports: [PortCounters; MAX_PORTS],
        drops: [Counter; DropReason::COUNT],
        /// Packets, bytes and new connections sent per backend, by
        /// [`BackendId::index`].
        backend_packets: BackendCounters,
        /// Packets per forwarding rule, by its counter slot.
        rule_packets: RuleCounters,
        conntrack: ConntrackStats,
        quic_lb: QuicLbStats,
    }
}

impl WorkerStats {
    pub fn new() -> CachePadded<Self> {
        CachePadded::new(Self::default())
    }

    #[inline(always)]
    pub fn count_drop(&self, reason: DropReason, n: u64) {
        self.drops[reason.index()].add(n);
    }

    /// `packets` packets of `bytes` bytes sent to backend `id`.
    #[inline(always)]
    pub fn backend(&self, id: BackendId, packets: u64, bytes: u64) {
        self.backend_packets.add(id, packets, bytes, false);
    }

    /// [`WorkerStats::backend`], and a new connection to `id` when
    /// `opened` (the packet's conntrack entry was created for it).
    #[inline(always)]
    pub fn backend_opened(&self, id: BackendId, packets: u64, bytes: u64, opened: bool) {
        self.backend_packets.add(id, packets, bytes, opened);
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(Counter::get).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_and_sum() {
        let s = WorkerStats::new();
        s.count_drop(DropReason::NoRule, 2);
        s.count_drop(DropReason::NotForUs, 3);
        s.backend(BackendId(3), 5, 0);
        s.backend(BackendId(9000), 4, 0);
        assert_eq!(s.total_drops(), 5);
        assert_eq!(s.backend_packets.get(3), 5);
        assert_eq!(s.backend_packets.get(9000), 4);
    }

    /// Rule slots count apart; a rule without a slot is counted, not lost.
    #[test]
    fn rule_counters_count_per_slot() {
        let s = WorkerStats::new();
        s.rule_packets.add(0);
        s.rule_packets.add(7);
        s.rule_packets.add(7);
        s.rule_packets.add(RuleCounters::NONE);
        assert_eq!(s.rule_packets.get(0), 1);
        assert_eq!(s.rule_packets.get(7), 2);
        assert_eq!(s.rule_packets.uncounted(), 1);
    }

    /// Every declared number has a valid metric name and a help text, and
    /// fields sharing a family share its export and differ in their label.
    #[test]
    fn declared_metrics_are_well_formed() {
        fn check<B>(metrics: &[Metric<B>], seen: &mut Vec<(&'static str, Export, FixedLabel)>) {
            for m in metrics {
                assert!(m.name.starts_with("sluice_"), "{}", m.name);
                assert!(
                    m.name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{}",
                    m.name
                );
                assert!(
                    !m.help().is_empty() && !m.help().contains('\n'),
                    "{}",
                    m.name
                );
                for &(name, export, label) in seen.iter() {
                    if name == m.name {
                        assert_eq!(export, m.export, "{name}: one family, one export");
                        assert!(
                            label.is_some() && label != m.label,
                            "{name}: series told apart by label"
                        );
                    }
                }
                seen.push((m.name, m.export, m.label));
            }
        }
        let mut seen = Vec::new();
        check(WorkerStats::METRICS, &mut seen);
        check(PortCounters::METRICS, &mut seen);
        check(ConntrackStats::METRICS, &mut seen);
        assert_eq!(seen.len(), 10 + 7 + 10);
    }

    /// A declared field is read by its metric: bumping one field moves
    /// exactly its own metric.
    #[test]
    fn each_metric_reads_its_own_field() {
        let s = WorkerStats::default();
        s.steered_in.add(3);
        s.polls.add(5);
        let read: Vec<(&str, FixedLabel, u64)> = WorkerStats::METRICS
            .iter()
            .map(|m| (m.name, m.label, (m.read)(&s)))
            .filter(|&(_, _, v)| v != 0)
            .collect();
        assert_eq!(
            read,
            [
                ("sluice_steered_packets_total", Some(("direction", "in")), 3),
                ("sluice_worker_polls_total", None, 5),
            ]
        );
    }

    /// Every index has its counter, the last one too, a generation counts
    /// on its index, and a reused index starts from zero.
    #[test]
    fn backend_counters_cover_every_index() {
        let s = WorkerStats::new();
        s.backend(BackendId::new(70_000, 1), 7, 100);
        assert_eq!(s.backend_packets.get(70_000), 7);
        assert_eq!(s.backend_packets.bytes(70_000), 100);
        s.backend_opened(BackendId::new(70_000, 1), 1, 0, true);
        assert_eq!(s.backend_packets.connections(70_000), 1);
        s.backend_packets.reset(70_000);
        s.backend(BackendId::new(70_000, 2), 1, 0);
        assert_eq!(s.backend_packets.get(70_000), 1);
        assert_eq!(s.backend_packets.connections(70_000), 0);
        let last = BackendId::INDEXES - 1;
        s.backend_opened(BackendId::new(last as u32, 4095), 1, 0, true);
        assert_eq!(s.backend_packets.get(last), 1);
        assert_eq!(s.backend_packets.connections(last), 1);
        assert_eq!(s.backend_packets.get(0), 0);
    }
}
