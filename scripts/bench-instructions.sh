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
# TRAFFIC=tcp (default) | syn | udp | drop, as in bench-throughput.sh; the
# traffic, devices and configuration are scripts/bench-config.sh's.
# SLUICE_BIN: the binary (default target/release/sluice, built here).
# Last line: burst_instructions_per_packet=X driver_instructions_per_packet=Y packets=N
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-config.sh

FLOWS=${FLOWS:-20000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
TRAFFIC=${TRAFFIC:-tcp}
bench_traffic
command -v valgrind >/dev/null || { echo "bench-instructions.sh: valgrind missing" >&2; exit 1; }
work=$(mktemp -d /tmp/sluice-instr.XXXXXX)
trap 'rm -rf "$work"' EXIT

bench_flows "$work"
NOHUGE=--no-huge BURST=32 ENCAP=gre CT_CAPACITY=131072 METRICS_LISTEN="" \
  bench_config "$work/bench.toml"

valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.%p" \
  "${SLUICE_BIN:-target/release/sluice}" run --config "$work/bench.toml" \
  --no-metrics-server --no-control-socket --duration "$SECONDS_PER_RUN" \
  --metrics-dump "$work/metrics.txt" >"$work/sluice.log" 2>&1 \
  || { cat "$work/sluice.log"; exit 1; }
# The worker thread's file: the one that ran the burst path.
worker=$(grep -l '::handle_burst' "$work"/cg.*-* | head -1)
packets=$(awk -v m="$COUNTED" '$1 == m {print $2}' "$work/metrics.txt")
callgrind_annotate --threshold=100 --auto=no "$worker" 2>/dev/null | awk -v n="$packets" '
  /file:function/ {on = 1; next}
  on && /::handle_burst/ {gsub(",", "", $1); burst += $1}
  on && /librte_net_(pcap|null)/ {gsub(",", "", $1); drivers += $1}
  END {printf "burst_instructions_per_packet=%.1f driver_instructions_per_packet=%.1f packets=%d\n",
       burst / n, drivers / n, n}'
