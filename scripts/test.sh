#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit/property tests, golden pcaps
# through the real binary on real DPDK (net_pcap, --no-huge), config checks,
# fuzz smoke, the Debian package, the live end-to-end suite in namespaces
# (QUIC-LB with a real QUIC stack and the conntrack hand-off across a
# restart included), and the appliance image booted in QEMU with traffic
# through it.
set -euo pipefail
cd "$(dirname "$0")/.."

# --image: QEMU, OVMF and the image tools for the boot test.
scripts/setup.sh --image

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The shipped configuration: without the tests, cargo leaves the
# controlplane's `test-hooks` feature off.
cargo clippy -p controlplane -p dataplane --locked -- -D warnings

# With the tests among the targets, controlplane's `test-hooks` feature is
# on (the tests' dev-dependency on the package itself): this
# target/debug/sluice has the golden tests' hooks.
echo "== cargo build (the sluice binary the golden tests run)"
cargo build --workspace --all-targets --locked

echo "== cargo test"
mkdir -p target
cargo test --workspace --locked 2>&1 | tee target/test-output.txt

echo "== fuzz smoke (a few seconds per target)"
scripts/fuzz-smoke.sh

echo "== sluice check-config conf/*.toml"
target/debug/sluice check-config conf/*.toml

# The shipped alerts: syntax, then their unit tests (each alert firing and
# not firing on sample series). The dashboard's and alerts' metric names
# are checked against a running sluice by controlplane/tests/metrics_shipped.rs.
echo "== promtool check rules / test rules (contrib/prometheus)"
(cd contrib/prometheus && promtool check rules sluice.rules.yml && promtool test rules sluice.rules.test.yml)
promtool_passed=2

# From here on target/debug/sluice is the product binary, built without
# the test hooks: the package, the e2e suite and the appliance run it.
echo "== cargo build (the shipped sluice binary: no test hooks)"
cargo build --locked -p controlplane --bin sluice

# The Debian package from that debug binary (same packaging as the
# release one scripts/package/build-deb.sh ships): files, conffile,
# Depends against the binary's NEEDED, check-config, systemd-analyze verify.
echo "== Debian package"
scripts/package/test-deb.sh --profile dev --no-build

# The live end-to-end suite: namespaces, real kernel clients and servers,
# sluice on net_af_packet with its TAP exception path; 1 and 2 workers.
e2e_passed=0
e2e_failed=0
for workers in 1 2; do
  echo "== e2e suite, $workers worker(s)"
  if python3 scripts/e2e/suite.py --workers "$workers" --sluice target/debug/sluice; then
    e2e_passed=$((e2e_passed + 1))
  else
    e2e_failed=$((e2e_failed + 1))
  fi
done

# QUIC-LB live: quinn clients and servers (target/debug/quic-peer, built
# with the workspace above) through sluice; connections move to a new
# port and a new address mid-transfer and must all survive with QUIC-LB.
echo "== QUIC-LB live test"
if python3 scripts/e2e/quic_lb.py --sluice target/debug/sluice --peer target/debug/quic-peer; then
  e2e_passed=$((e2e_passed + 1))
else
  e2e_failed=$((e2e_failed + 1))
fi

# The conntrack hand-off live: keep-alive connections across a SIGTERM and
# a new `sluice run` of the same configuration path (table change, CT-8 on
# an unhealthy backend, failover pool, 1 -> 2 workers): none may fail with
# the hand-off, and the same restarts without it (--no-handoff) must cost
# connections.
echo "== conntrack hand-off live test"
if python3 scripts/e2e/handoff.py --sluice target/debug/sluice; then
  e2e_passed=$((e2e_passed + 1))
else
  e2e_failed=$((e2e_failed + 1))
fi

# VXLAN live: HTTP to both VIPs through real kernel vxlan devices on the
# backends (IPv4 and IPv6 outer headers), and a backend whose device has
# another MAC losing its share until it takes the service's vxlan_mac.
echo "== VXLAN live test"
if python3 scripts/e2e/vxlan.py --sluice target/debug/sluice; then
  e2e_passed=$((e2e_passed + 1))
else
  e2e_failed=$((e2e_failed + 1))
fi

# Health checks through the data path live: backends misconfigured one
# way each (VXLAN device MAC, VIP not bound, no VXLAN device, strict
# rp_filter, answers from the backend's own address) each caught with its
# reason while the direct check passes them; the right ones carry traffic.
echo "== data-path health checks live test"
if python3 scripts/e2e/data_path.py --sluice target/debug/sluice; then
  e2e_passed=$((e2e_passed + 1))
else
  e2e_failed=$((e2e_failed + 1))
fi

# The scale-out suite: two appliances behind a BIRD router with ECMP, each
# announcing the VIPs over BGP through its own BIRD; kill -9, SIGTERM,
# restart and a per-VIP withdrawal under traffic (docs/scale-out.md). The
# appliances idle adaptively: they share two cores with the router, the
# backends and the clients, as appliances in a VM would.
echo "== scale-out suite"
if python3 scripts/e2e/scaleout.py --sluice target/debug/sluice --idle '"adaptive"'; then
  e2e_passed=$((e2e_passed + 1))
else
  e2e_failed=$((e2e_failed + 1))
fi

# The appliance: the image built from the package above (root filesystem
# cached in target/image-cache by package list), booted under QEMU (KVM
# when it works, TCG otherwise) with a virtio data NIC on vfio-pci and
# hugepages; client, backends, reloads and a kill -9 restart through it.
echo "== appliance image: build and boot test"
boot_passed=0
boot_failed=0
if scripts/image/boot-test.sh --deb "$(ls target/debian-test/sluice_*.deb)" | tee target/boot-test-output.txt; then
  boot_passed=$(awk '/^boot-test: [0-9]+ passed/ {print $2}' target/boot-test-output.txt)
else
  boot_failed=1
fi

passed=$(awk '/^test result:/ {s += $4} END {print s + 0}' target/test-output.txt)
failed=$(awk '/^test result:/ {s += $6} END {print s + 0}' target/test-output.txt)
passed=$((passed + e2e_passed + ${boot_passed:-0} + promtool_passed))
failed=$((failed + e2e_failed + boot_failed))
if ((e2e_failed || boot_failed)); then
  echo "tests: $passed passed, $failed failed"
  ((e2e_failed == 0)) || echo "test.sh: e2e suite failed" >&2
  ((boot_failed == 0)) || echo "test.sh: appliance boot test failed" >&2
  exit 1
fi
echo "test.sh: all passed"
echo "tests: $passed passed, $failed failed"
