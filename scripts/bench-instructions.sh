#!/usr/bin/env bash
# Instructions per packet of the worker's burst path, counted by callgrind
# on the real binary: deterministic where Mpps on a shared machine is not
# (an A/B of two binaries then compares numbers that repeat to ±0.5 %).
#
# The throughput harness's devices (scripts/bench-throughput.sh): net_pcap
# with infinite_rx=1 replaying FLOWS 64-byte flows (pktgen), GRE to three
# backends on net_null, one worker, conntrack_capacity 131072 (a small
# shard: start-up under valgrind stays short). sluice runs under
# `valgrind --tool=callgrind --separate-threads=yes` for SECONDS_PER_RUN;
# the worker thread's self cost in `BurstPath::handle_burst` (the staged
# pipeline inlined into it: stage 1, conntrack, delivery, TX queueing)
# and in the two drivers' burst functions is divided by the packets sent.
# Time-driven work (conntrack sweeps, start-up) is left out, so the figures
# do not depend on how fast valgrind ran.
#
# TRAFFIC=tcp (default) | udp | drop, as in bench-throughput.sh.
# SLUICE_BIN: the binary (default target/release/sluice, built here).
# Last line: burst_instructions_per_packet=X driver_instructions_per_packet=Y packets=N
set -euo pipefail
cd "$(dirname "$0")/.."

FLOWS=${FLOWS:-20000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
TRAFFIC=${TRAFFIC:-tcp}
case "$TRAFFIC" in
  tcp) GEN_FLAG=""; RULE_PROTO=TCP; RULE_PORT=80; DST=203.0.113.10 ;;
  udp) GEN_FLAG="--udp"; RULE_PROTO=UDP; RULE_PORT=53; DST=203.0.113.10 ;;
  drop) GEN_FLAG="--udp"; RULE_PROTO=UDP; RULE_PORT=53; DST=203.0.113.99 ;;
  *) echo "TRAFFIC must be tcp, udp or drop" >&2; exit 2 ;;
esac
command -v valgrind >/dev/null || { echo "bench-instructions.sh: valgrind missing" >&2; exit 1; }
work=$(mktemp -d /tmp/sluice-instr.XXXXXX)
trap 'rm -rf "$work"' EXIT

cargo build --release --locked -q -p controlplane -p sluice-benches --bins
target/release/pktgen "$FLOWS" "$work/flows.pcap" "$DST" 02:00:00:00:00:01 $GEN_FLAG 2>/dev/null
MBUFS=$(( (FLOWS + 65536) | 1 ))
cat > "$work/bench.toml" <<TOML
[dataplane]
eal_args = ["--no-huge", "-m", "$(( MBUFS * 3 / 1000 + 512 ))", "--no-pci", "--log-level=error"]
workers = 1
mbufs = $MBUFS
burst_size = 32
conntrack_capacity = 131072

[[dataplane.port]]
name = "clients"
device = "net_pcap0,rx_pcap=$work/flows.pcap,infinite_rx=1"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"

[[dataplane.port]]
name = "backends"
device = "net_null0,no-rx=1"
mac = "02:00:00:00:00:02"
address = "198.18.0.1/24"

[[backend_service]]
name = "web"
encapsulation = "gre"
backend = [
  { address = "198.18.0.10", mac = "02:00:00:00:00:10" },
  { address = "198.18.0.11", mac = "02:00:00:00:00:11" },
  { address = "198.18.0.12", mac = "02:00:00:00:00:12" },
]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "$RULE_PROTO"
ports = "$RULE_PORT"
backend_service = "web"
TOML

valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.%p" \
  "${SLUICE_BIN:-target/release/sluice}" run --config "$work/bench.toml" \
  --no-metrics-server --no-control-socket --duration "$SECONDS_PER_RUN" \
  --metrics-dump "$work/metrics.txt" >"$work/sluice.log" 2>&1 \
  || { cat "$work/sluice.log"; exit 1; }
# The worker thread's file: the one that ran the burst path.
worker=$(grep -l '::handle_burst' "$work"/cg.*-* | head -1)
COUNTED='sluice_port_tx_packets_total{port="backends"}'
[ "$TRAFFIC" = drop ] && COUNTED='sluice_port_rx_packets_total{port="clients"}'
packets=$(awk -v m="$COUNTED" '$1 == m {print $2}' "$work/metrics.txt")
callgrind_annotate --threshold=100 --auto=no "$worker" 2>/dev/null | awk -v n="$packets" '
  /file:function/ {on = 1; next}
  on && /::handle_burst/ {gsub(",", "", $1); burst += $1}
  on && /librte_net_(pcap|null)/ {gsub(",", "", $1); drivers += $1}
  END {printf "burst_instructions_per_packet=%.1f driver_instructions_per_packet=%.1f packets=%d\n",
       burst / n, drivers / n, n}'
