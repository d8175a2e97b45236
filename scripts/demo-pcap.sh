#!/usr/bin/env bash
# The pcap-replay demo (first light; the live demo is scripts/demo.sh): builds sluice, generates client traffic
# (many distinct TCP flows to a VIP), replays it through the real binary on
# real DPDK (net_pcap, no hugepages needed), and shows how the flows spread
# over the backends, what the backends received (GRE-encapsulated), and the
# Prometheus metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null

FLOWS=${FLOWS:-20000}
work=$(mktemp -d /tmp/sluice-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== building sluice (release)"
cargo build --release --locked -q -p controlplane -p sluice-benches --bins

echo "== generating $FLOWS client flows to VIP 203.0.113.10:80"
target/release/pktgen "$FLOWS" "$work/clients.pcap" 203.0.113.10 02:00:00:00:00:01

cat > "$work/demo.toml" <<TOML
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--log-level=error"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap=$work/clients.pcap,tx_pcap=$work/to-backends.pcap"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
encapsulation = "gre"
backend = [
  { address = "192.0.2.10", mac = "02:00:00:00:00:10" },
  { address = "192.0.2.11", mac = "02:00:00:00:00:11" },
  { address = "192.0.2.12", mac = "02:00:00:00:00:12" },
]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"
TOML

echo "== sluice check-config"
target/release/sluice check-config "$work/demo.toml"

echo "== sluice run (replaying the pcap through DPDK net_pcap)"
target/release/sluice run --config "$work/demo.toml" --no-metrics-server \
  --exit-on-idle 500 --metrics-dump "$work/metrics.txt"

echo
echo "== distribution of $FLOWS flows over the backends (Maglev, M = 65537)"
total=$(awk '/^sluice_backend_packets_total/ {s += $2} END {print s}' "$work/metrics.txt")
awk -v total="$total" '/^sluice_backend_packets_total/ {
  match($0, /backend="[^"]+"/); b = substr($0, RSTART + 9, RLENGTH - 10);
  printf "  %-14s %8d packets  %5.1f%%  ", b, $2, 100 * $2 / total;
  n = int(60 * $2 / total); for (i = 0; i < n; i++) printf "#"; printf "\n" }' "$work/metrics.txt"

echo
echo "== what backend 192.0.2.10 receives (first 3 packets, GRE in IPv4)"
if command -v tcpdump >/dev/null; then
  tcpdump -nn -r "$work/to-backends.pcap" -c 3 'ip dst 192.0.2.10' 2>/dev/null || true
fi

echo
echo "== /metrics (slice)"
grep -E '^sluice_(port|dropped_packets_total\{reason="(no_rule|not_for_us|no_backend)"|snapshot)' "$work/metrics.txt"
rx=$(awk '/^sluice_port_rx_packets_total/ {s += $2} END {print s}' "$work/metrics.txt")
tx=$(awk '/^sluice_port_tx_packets_total/ {s += $2} END {print s}' "$work/metrics.txt")
drops=$(awk '/^sluice_dropped_packets_total/ {s += $2} END {print s}' "$work/metrics.txt")
echo
echo "accounting: rx=$rx tx=$tx drops=$drops -> rx == tx + drops: $([ "$rx" -eq $((tx + drops)) ] && echo yes || echo NO)"
