//! A reload's build of the changed services gives what a full build
//! gives (AP-5, CT-10): two pipelines take the same reloads, one always
//! building in full, the other building only the changed services when
//! it can; their snapshots agree after every reload, up to the ids
//! (arbitrary numbers: compared by backend address).

use std::fmt::Write as _;

use proptest::prelude::*;

use super::*;
use crate::config::Loader;

const SERVICES: usize = 12;

/// One service of the file: its backends (host numbers) with weights,
/// and an idle timeout.
#[derive(Clone, Debug)]
struct Service {
    backends: Vec<(u8, u16)>,
    idle_s: u32,
}

fn render(services: &[Service], rule_port: u16) -> String {
    let mut t = String::from(
        "[dataplane]\n[[dataplane.port]]\nname = \"p\"\ndevice = \"net_null0\"\n\
         address = \"10.0.0.1/8\"\n",
    );
    for (i, s) in services.iter().enumerate() {
        let _ = writeln!(
            t,
            "[[backend_service]]\nname = \"s{i}\"\nmaglev_table_size = 251\n\
             connection_draining_timeout = \"{}\"\n\
             connection_tracking = {{ idle_timeout = \"{}s\" }}\nbackend = [",
            if i % 2 == 0 { "30s" } else { "0s" },
            s.idle_s
        );
        for (host, weight) in &s.backends {
            let _ = writeln!(
                t,
                "  {{ address = \"10.{i}.0.{host}\", mac = \"02:00:00:00:00:01\", weight = {weight} }},"
            );
        }
        t.push_str("]\n");
    }
    for i in 0..services.len() {
        let port = if i == 0 { rule_port } else { 80 };
        let _ = writeln!(
            t,
            "[[forwarding_rule]]\nname = \"r{i}\"\nvip = \"203.0.113.{}\"\nports = \"{port}\"\n\
             backend_service = \"s{i}\"",
            i + 1
        );
    }
    t
}

/// One reload's edit.
#[derive(Clone, Debug)]
enum Edit {
    Weight {
        service: usize,
        backend: usize,
        weight: u16,
    },
    Add {
        service: usize,
        host: u8,
    },
    Remove {
        service: usize,
        backend: usize,
    },
    Idle {
        service: usize,
        seconds: u32,
    },
    RulePort(u16),
    /// Two services at once.
    Both(usize, usize, u16),
    /// The clock moves on (draining deadlines pass).
    Wait(u64),
}

fn edit() -> impl Strategy<Value = Edit> {
    let svc = 0..SERVICES;
    prop_oneof![
        3 => (svc.clone(), any::<usize>(), 1u16..5).prop_map(|(service, backend, weight)| Edit::Weight { service, backend, weight }),
        2 => (svc.clone(), 1u8..40).prop_map(|(service, host)| Edit::Add { service, host }),
        2 => (svc.clone(), any::<usize>()).prop_map(|(service, backend)| Edit::Remove { service, backend }),
        1 => (svc.clone(), 1u32..100).prop_map(|(service, seconds)| Edit::Idle { service, seconds }),
        1 => (80u16..83).prop_map(Edit::RulePort),
        1 => (svc.clone(), svc, 1u16..5).prop_map(|(a, b, w)| Edit::Both(a, b, w)),
        1 => (1u64..40).prop_map(|s| Edit::Wait(s * 1000)),
    ]
}

/// What a snapshot says, without its ids.
fn describe(st: &ForwardingState, reports: &[ServiceReport]) -> String {
    let state = |id: BackendId| {
        st.backends
            .get(id.index())
            .and_then(Option::as_ref)
            .filter(|b| b.id == id)
    };
    let addr = |id: BackendId| state(id).map_or("?".to_string(), |b| b.address.to_string());
    let draining = |id: &BackendId| state(*id).is_some_and(|b| b.draining_until.is_some());
    let mut out = format!("{:?}\n{:?}\n{:?}\n", st.rules, st.ports, st.zones);
    for s in &st.services {
        let configured: Vec<String> = s
            .backends
            .iter()
            .filter(|id| !draining(id))
            .map(|&id| addr(id))
            .collect();
        // A full build lists draining backends in its map's order.
        let mut drained: Vec<String> = s
            .backends
            .iter()
            .filter(|id| draining(id))
            .map(|&id| addr(id))
            .collect();
        drained.sort();
        let tables: Vec<Vec<String>> = s
            .tables
            .iter()
            .map(|t| t.slots.iter().map(|&id| addr(id)).collect())
            .collect();
        let mut rest = s.clone();
        rest.backends.clear();
        rest.tables.clear();
        let _ = writeln!(
            out,
            "{rest:?} {configured:?} draining {drained:?} {tables:?}"
        );
    }
    let mut backends: Vec<String> = st
        .backends
        .iter()
        .flatten()
        .map(|b| {
            let header = st.lane_backends.header(b.id).map(|h| format!("{h:?}"));
            let mut b = b.clone();
            b.id = BackendId::new(0, 0);
            format!("{b:?} {header:?}")
        })
        .collect();
    backends.sort();
    for b in backends {
        let _ = writeln!(out, "{b}");
    }
    for r in reports {
        let mut r = r.clone();
        r.build_seconds = 0.0;
        let _ = writeln!(out, "{r:?}");
    }
    out
}

/// One pipeline: its ids, memory and last snapshot.
struct Pipeline {
    ids: BackendIds,
    memory: PolicyMemory,
    last: Option<(ForwardingState, Vec<ServiceReport>)>,
    cfg: Option<Arc<Config>>,
    patched: usize,
}

impl Pipeline {
    fn new() -> Self {
        Self {
            ids: BackendIds::new(),
            memory: PolicyMemory::default(),
            last: None,
            cfg: None,
            patched: 0,
        }
    }

    fn build(&mut self, cfg: Arc<Config>, now: Millis, generation: u64, patch: bool) {
        let inputs = BuildInputs {
            now,
            ..BuildInputs::default()
        };
        let changed = match (&self.cfg, patch) {
            (Some(old), true) => changed_in_place(old, &cfg),
            _ => None,
        };
        let patched = match (changed, &self.last) {
            (Some(changed), Some((prev, reports))) => rebuild_changed_services(
                prev,
                reports,
                &cfg,
                &changed,
                &mut self.ids,
                &mut self.memory,
                &inputs,
                generation,
            ),
            _ => None,
        };
        if patched.is_some() {
            self.patched += 1;
        }
        let built = patched.unwrap_or_else(|| {
            build_forwarding_state_with(
                &cfg,
                &[[2, 0, 0, 0, 0, 1]],
                &mut self.ids,
                &mut self.memory,
                &inputs,
                generation,
            )
        });
        // Every older snapshot is gone: leaving ids are freed for reuse.
        self.ids.release(generation, now, 0, |_| {});
        self.last = Some(built);
        self.cfg = Some(cfg);
    }
}

fn apply(services: &mut [Service], rule_port: &mut u16, now: &mut u64, e: &Edit) {
    match *e {
        Edit::Weight {
            service,
            backend,
            weight,
        } => {
            let s = &mut services[service];
            if !s.backends.is_empty() {
                let n = s.backends.len();
                s.backends[backend % n].1 = weight;
            }
        }
        Edit::Add { service, host } => {
            let s = &mut services[service];
            if !s.backends.iter().any(|(h, _)| *h == host) {
                s.backends.push((host, 1));
            }
        }
        Edit::Remove { service, backend } => {
            let s = &mut services[service];
            if !s.backends.is_empty() {
                let n = s.backends.len();
                s.backends.remove(backend % n);
            }
        }
        Edit::Idle { service, seconds } => services[service].idle_s = seconds,
        Edit::RulePort(p) => *rule_port = p,
        Edit::Both(a, b, w) => {
            for i in [a, b] {
                if let Some(first) = services[i].backends.first_mut() {
                    first.1 = w;
                }
            }
        }
        Edit::Wait(ms) => *now += ms,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// AP-5, CT-10: a build of only the changed services gives the full
    /// build's snapshot, through weights, backends added and removed
    /// (draining and not), tracking changes, rule changes, two services
    /// at once and draining deadlines passing.
    #[test]
    fn ap_5_building_changed_services_equals_a_full_build(
        edits in prop::collection::vec(edit(), 1..16),
    ) {
        let mut services: Vec<Service> = (0..SERVICES)
            .map(|i| Service { backends: (1..=3 + (i % 3) as u8).map(|h| (h, 1)).collect(), idle_s: 60 })
            .collect();
        let mut rule_port = 80;
        let mut now = 1_000u64;
        let mut loader = Loader::new();
        let mut full = Pipeline::new();
        let mut patching = Pipeline::new();
        let mut generation = 1;
        let first = Arc::new(loader.load_str(&render(&services, rule_port), "t.toml").unwrap());
        full.build(Arc::clone(&first), Millis(now), generation, false);
        patching.build(first, Millis(now), generation, true);
        for e in &edits {
            apply(&mut services, &mut rule_port, &mut now, e);
            let cfg = Arc::new(loader.load_str(&render(&services, rule_port), "t.toml").unwrap());
            generation += 1;
            full.build(Arc::clone(&cfg), Millis(now), generation, false);
            patching.build(cfg, Millis(now), generation, true);
            let (f, fr) = full.last.as_ref().unwrap();
            let (p, pr) = patching.last.as_ref().unwrap();
            prop_assert_eq!(describe(p, pr), describe(f, fr), "after {:?}", e);
            prop_assert_eq!(p.backends.len(), f.backends.len());
        }
        // Without the clock moving no draining deadline passes: every
        // reload (one or two services, or rules) took the changed-services
        // build.
        if !edits.iter().any(|e| matches!(e, Edit::Wait(_))) {
            prop_assert_eq!(patching.patched, edits.len());
        }
    }
}
