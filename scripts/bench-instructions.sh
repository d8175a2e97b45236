#!/usr/bin/env bash
# Instructions per packet of the worker's burst path, counted by callgrind
# on the real binary: deterministic where Mpps on a shared machine is not
# (an A/B of two binaries then compares numbers that repeat to ±0.1 %).
#
# The throughput harness's devices (scripts/bench-throughput.sh): net_pcap
# with infinite_rx=1 replaying FLOWS 64-byte flows (pktgen), GRE to three
# backends on net_null, one worker, conntrack_capacity 131072 (a small
# shard: start-up under valgrind stays short). sluice runs under
# `valgrind --tool=callgrind --separate-threads=yes` for SECONDS_PER_RUN.
#
# Steady state only: once the worker has received every flow twice (its
# conntrack entries are in, counted by the burst calls so far), callgrind
# is told to dump, which zeroes its counters; the figures come from the
# last dump, written at exit, and are per packet of that interval. So
# start-up, the first packet of each flow and the machine's load stay out
# of them. The packets are the burst calls times BURST: infinite_rx
# fills every RX burst (checked: over the whole run, calls × BURST must
# equal the packets the metrics counted).
#
# burst_instructions_per_packet is INCLUSIVE: on the worker thread, the
# cost of `BurstPath::handle_burst` (the staged pipeline inlined into it:
# stage 1, conntrack, delivery, TX queueing) plus the inclusive cost of
# every call it makes to a function the compiler left out of line
# (`Shard::lookup_away`, inserts, …), read from the callgrind file's own
# records of that function (its cost lines and its `calls=` lines): a
# callee counts the same inlined or not. A driver TX burst called from it
# (a full TX lane) is left out of that sum; driver_instructions_per_packet
# is the self cost of the two drivers' functions (net_pcap RX, net_null
# TX) wherever they are called from. burst_self_per_packet:
# `handle_burst`'s own cost alone, for comparison with older figures.
#
# TRAFFIC=tcp (default) | syn | udp | drop, as in bench-throughput.sh; the
# traffic, devices and configuration are scripts/bench-config.sh's.
# SLUICE_BIN: the binary (default target/release/sluice, built here).
# KEEP=1: the work directory (callgrind files, metrics) is kept and named.
# Last line: burst_instructions_per_packet=X driver_instructions_per_packet=Y
#   packets=N burst_self_per_packet=Z
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-config.sh

FLOWS=${FLOWS:-20000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
TRAFFIC=${TRAFFIC:-tcp}
BURST=32
bench_traffic
command -v valgrind >/dev/null || { echo "bench-instructions.sh: valgrind missing" >&2; exit 1; }
work=$(mktemp -d /tmp/sluice-instr.XXXXXX)
if [ -n "${KEEP:-}" ]; then echo "work=$work" >&2; else trap 'rm -rf "$work"' EXIT; fi

bench_flows "$work"
NOHUGE=--no-huge ENCAP=gre CT_CAPACITY=131072 METRICS_LISTEN="" \
  bench_config "$work/bench.toml"

# Callgrind's format: `fn=(id) name` opens a function's records (the name
# only at an id's first use in the file), a bare `position cost` line is
# its own cost, and the line after `calls=COUNT …` is the inclusive cost
# of the call `cfn=` names. Prints the burst calls, the burst path's self
# and callee cost, and the drivers' self cost of one file.
summarise() {
  awk '
    # Ids are per kind: objects (ob, cob) and functions (fn, cfn) apart.
    function named(kind, tok,   id) {
      if (tok !~ /^\(/) return tok
      id = tok; sub(/\).*/, "", id); sub(/^\(/, "", id)
      if (tok ~ /\) /) { sub(/^\([0-9]+\) /, "", tok); names[kind, id] = tok }
      return names[kind, id]
    }
    /^fn=/ { fn = named("fn", substr($0, 4)); next }
    /^cfn=/ { cfn = named("fn", substr($0, 5)); next }
    /^ob=/ { ob = named("ob", substr($0, 4)); next }
    /^cob=/ { named("ob", substr($0, 5)); next }
    /^calls=/ {
      call = 1
      if (cfn ~ /::handle_burst$/) { split($1, c, "="); bursts += c[2] }
      next
    }
    /^[0-9+*-]/ {
      cost = ($2 == "") ? 0 : $2
      in_burst = fn ~ /::handle_burst$/
      if (call) {
        call = 0
        # A full TX lane sent from within the burst: the driver figure.
        if (in_burst && cfn !~ /rte_eth_tx_burst/) callees += cost
      } else {
        if (in_burst) self += cost
        if (ob ~ /librte_net_(pcap|null)/) drivers += cost
      }
    }
    END { printf "%.0f %.0f %.0f %.0f\n", bursts, self, callees, drivers }' "$1"
}

valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.%p" \
  "${SLUICE_BIN:-target/release/sluice}" run --config "$work/bench.toml" \
  --no-metrics-server --no-control-socket --duration "$SECONDS_PER_RUN" \
  --metrics-dump "$work/metrics.txt" >"$work/sluice.log" 2>&1 &
vg=$!
# Intermediate dumps (cg.PID.N-THREAD) until every flow was seen twice.
warm=0
while kill -0 "$vg" 2>/dev/null && [ "$warm" -lt $(( 2 * FLOWS )) ]; do
  sleep 1
  callgrind_control -d "$vg" >/dev/null 2>&1 || true
  warm=0
  for f in "$work"/cg."$vg".*-*; do
    [ -e "$f" ] || continue
    read -r b _ < <(summarise "$f")
    warm=$(( warm + b * BURST ))
  done
done
wait "$vg" || { cat "$work/sluice.log"; exit 1; }
[ "$warm" -ge $(( 2 * FLOWS )) ] || {
  echo "bench-instructions.sh: only $warm packets before the end; raise SECONDS_PER_RUN" >&2
  exit 1
}
# The last dump's worker thread: the file with the burst path in it.
worker=$(grep -l '::handle_burst' "$work"/cg."$vg"-* | head -1)
read -r bursts self callees drivers < <(summarise "$worker")
packets=$(( bursts * BURST ))
counted=$(awk -v m="$COUNTED" '$1 == m {print $2}' "$work/metrics.txt")
[ "$counted" -eq $(( packets + warm )) ] || {
  echo "bench-instructions.sh: $counted packets counted, $(( packets + warm )) in full bursts" >&2
  exit 1
}
[ "$packets" -gt 0 ] || { echo "bench-instructions.sh: no packets after the warm-up; raise SECONDS_PER_RUN" >&2; exit 1; }
awk -v n="$packets" -v s="$self" -v c="$callees" -v d="$drivers" 'BEGIN {
  printf "burst_instructions_per_packet=%.1f driver_instructions_per_packet=%.1f packets=%d burst_self_per_packet=%.1f\n",
    (s + c) / n, d / n, n, s / n }'
