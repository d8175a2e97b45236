//! AP-5: every shipped configuration in `conf/` validates.

use std::path::Path;

use controlplane::config::{self, Encapsulation, LocalityLbPolicy, Pool, PortRange, RuleProtocol};
use sluice_core::encap::{Geneve, Gue};

fn conf_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf")
}

#[test]
fn ap_5_every_conf_file_validates() {
    let mut n = 0;
    for entry in std::fs::read_dir(conf_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(d) = config::load_file(&path) {
                panic!("{} does not validate:\n{d}", path.display());
            }
            n += 1;
        }
    }
    assert!(
        n >= 3,
        "expected at least example, l2-dsr and gre; found {n}"
    );
}

#[test]
fn example_values_and_defaults() {
    let cfg = config::load_file(&conf_dir().join("example.toml")).unwrap();
    let dp = &cfg.dataplane;
    assert_eq!(dp.eal_args, ["--no-huge", "-m", "512", "--no-pci"]);
    assert_eq!((dp.workers, dp.burst_size), (1, 32));
    assert_eq!(dp.ports[0].name, "uplink");
    assert_eq!(dp.ports[0].mac, Some([2, 0, 0, 0, 0, 1]));
    assert_eq!(dp.ports[0].mtu, 1500);
    assert!(dp.ports[0].ipv4.is_some() && dp.ports[0].ipv6.is_some());
    assert_eq!(cfg.metrics.listen.to_string(), "127.0.0.1:9064");
    let web = cfg.service("web").unwrap();
    assert_eq!(web.locality_lb_policy, LocalityLbPolicy::WeightedMaglev);
    assert_eq!(web.backends[2].pool, Pool::Failover);
    assert_eq!(web.backends[0].zone, Some(0));
    assert_eq!(web.failover_policy.unwrap().failover_ratio, 0.5);
    let dns = cfg.service("dns").unwrap();
    assert_eq!(dns.encapsulation, Encapsulation::Gue(Gue { port: 6080 }));
    assert_eq!(cfg.forwarding_rules[2].protocol, RuleProtocol::L3Default);
    assert_eq!(cfg.forwarding_rules[2].ports, PortRange::ALL);
    assert_eq!(cfg.forwarding_rules[2].backend_service, 1);
}

/// AP-3: `conf/geneve.toml` gives a GENEVE service its VNI and the
/// default port, 6081.
#[test]
fn ap_3_geneve_example_sets_vni_and_default_port() {
    let cfg = config::load_file(&conf_dir().join("geneve.toml")).unwrap();
    let svc = cfg.service("inspect").unwrap();
    assert_eq!(
        svc.encapsulation,
        Encapsulation::Geneve(Geneve {
            port: 6081,
            vni: 100
        })
    );
}

/// HC-3, CT-5, MG-1 and the other SPEC defaults apply when fields are omitted.
#[test]
fn hc_3_ct_5_mg_1_defaults() {
    let cfg = config::load_file(&conf_dir().join("l2-dsr.toml")).unwrap();
    let hc = &cfg.health_checks[0];
    assert_eq!(hc.check_interval.as_secs(), 5);
    assert_eq!(hc.timeout.as_secs(), 5);
    assert_eq!((hc.healthy_threshold, hc.unhealthy_threshold), (2, 3));
    let svc = &cfg.backend_services[0];
    assert_eq!(svc.maglev_table_size, 65537);
    assert_eq!(svc.connection_tracking.idle_timeout.as_secs(), 60);
    assert!(svc.connection_draining_timeout.is_zero());
    assert!(svc.failover_policy.is_none());
    assert_eq!(svc.backends[0].weight, 1);
    assert_eq!(cfg.dataplane.workers, 1);
    assert_eq!(cfg.metrics.listen.to_string(), "127.0.0.1:9064");
}
