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
# thread_total_per_packet: everything the worker thread executed in the
# last dump (poll loop, drivers, burst path, mempool, …), per packet.
#
# PEER=1 (TRAFFIC=tcp or syn): the C peer benches/c-peer/lb_peer.c
# (built as bench-throughput.sh builds it, into target/release/lb_peer)
# instead of sluice, with bench-throughput.sh's EAL arguments on the same
# devices and pcap. Its packets so far are its worker's calls of the
# net_pcap RX function times BURST (infinite_rx returns a full burst or
# none, and the peer only transmits after a non-empty one: checked, over
# the whole run the RX calls must equal the net_null TX calls). Warm-up
# and dumps as for sluice; then it runs SECONDS_PER_RUN more and is
# stopped by SIGINT. burst_instructions_per_packet is the inclusive cost
# of its `worker` function (its whole poll loop: parse, CRC hash, bulk
# rte_hash lookup, Maglev, insert, GRE, checksum; its rte_hash calls
# included) minus its calls of the two drivers' burst functions (their
# inclusive cost); driver_instructions_per_packet as for sluice;
# thread_total_per_packet as for sluice. What the drivers call themselves
# (ld.so's __tls_get_addr, for the mempool cache) is in neither burst nor
# driver figure, for either program: only in thread_total_per_packet.
#
# TRAFFIC=tcp (default) | syn | udp | drop, as in bench-throughput.sh; the
# traffic, devices and configuration are scripts/bench-config.sh's.
# SLUICE_BIN: the binary (default target/release/sluice, built here).
# KEEP=1: the work directory (callgrind files, metrics) is kept and named.
# Last line: burst_instructions_per_packet=X driver_instructions_per_packet=Y
#   packets=N burst_self_per_packet=Z thread_total_per_packet=T
#   (PEER=1: burst_instructions_per_packet=X driver_instructions_per_packet=Y
#   packets=N thread_total_per_packet=T)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-config.sh

FLOWS=${FLOWS:-20000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
TRAFFIC=${TRAFFIC:-tcp}
BURST=32
bench_traffic
if [ "${PEER:-0}" = 1 ]; then
  case "$TRAFFIC" in
    tcp|syn) ;;
    *) echo "PEER=1 needs TRAFFIC=tcp or syn" >&2; exit 2 ;;
  esac
fi
command -v valgrind >/dev/null || { echo "bench-instructions.sh: valgrind missing" >&2; exit 1; }
work=$(mktemp -d /tmp/sluice-instr.XXXXXX)
if [ -n "${KEEP:-}" ]; then echo "work=$work" >&2; else trap 'rm -rf "$work"' EXIT; fi

bench_flows "$work"
NOHUGE=--no-huge ENCAP=gre CT_CAPACITY=131072 METRICS_LISTEN="" \
  bench_config "$work/bench.toml"

# Callgrind's format: `fn=(id) name` opens a function's records (the name
# only at an id's first use in the file), a bare `position cost` line is
# its own cost, and the line after `calls=COUNT …` is the inclusive cost
# of the call `cfn=` names. Names are per kind (objects ob/cob, functions
# fn/cfn apart); NAMED, the awk prelude of both summaries below, resolves
# an id to its name.
NAMED='
    function named(kind, tok,   id) {
      if (tok !~ /^\(/) return tok
      id = tok; sub(/\).*/, "", id); sub(/^\(/, "", id)
      if (tok ~ /\) /) { sub(/^\([0-9]+\) /, "", tok); names[kind, id] = tok }
      return names[kind, id]
    }'

# Prints the burst calls, the burst path's self and callee cost, the
# drivers' self cost and the total (every self cost) of one file.
summarise() {
  awk "$NAMED"'
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
        total += cost
      }
    }
    END { printf "%.0f %.0f %.0f %.0f %.0f\n", bursts, self, callees, drivers, total }' "$1"
}

# The same for the peer: its worker's calls of the net_pcap RX and the
# net_null TX burst functions (a call's object is `cob=`'s, else the
# caller's), the worker's self cost and the inclusive cost of its calls
# other than those, the drivers' self cost and the total of one file.
summarise_peer() {
  awk "$NAMED"'
    /^fn=/ { fn = named("fn", substr($0, 4)); cob = ""; next }
    /^cfn=/ { cfn = named("fn", substr($0, 5)); next }
    /^ob=/ { ob = named("ob", substr($0, 4)); cob = ""; next }
    /^cob=/ { cob = named("ob", substr($0, 5)); next }
    /^calls=/ {
      call = 1; split($1, c, "="); callee = (cob == "") ? ob : cob
      if (fn == "worker" && callee ~ /librte_net_pcap/) rx += c[2]
      if (fn == "worker" && callee ~ /librte_net_null/) tx += c[2]
      next
    }
    /^[0-9+*-]/ {
      cost = ($2 == "") ? 0 : $2
      if (call) {
        call = 0
        if (fn == "worker" && callee !~ /librte_net_(pcap|null)/) callees += cost
        cob = ""
      } else {
        if (fn == "worker") self += cost
        if (ob ~ /librte_net_(pcap|null)/) drivers += cost
        total += cost
      }
    }
    END { printf "%.0f %.0f %.0f %.0f %.0f %.0f\n", rx, tx, self, callees, drivers, total }' "$1"
}

# Intermediate dumps (cg.PID.N-THREAD) of the callgrind run $1 until
# every flow was seen twice: `warm` is the packets so far, the first
# figure of summary $2 (burst or RX calls) over every dump, times BURST.
warm_up() {
  warm=0
  while kill -0 "$1" 2>/dev/null && [ "$warm" -lt $(( 2 * FLOWS )) ]; do
    sleep 1
    callgrind_control -d "$1" >/dev/null 2>&1 || true
    warm=0
    for f in "$work"/cg."$1".*-*; do
      [ -e "$f" ] || continue
      read -r calls _ < <("$2" "$f")
      warm=$(( warm + calls * BURST ))
    done
  done
}

if [ "${PEER:-0}" = 1 ]; then
  peer=$(bench_peer)
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.%p" \
    $peer --no-huge -m "$MEM" --no-pci --file-prefix=bench-instr-peer-$$ --lcores=0@0,1@1 \
    --log-level=error --vdev="$RX_DEV" --vdev="$TX_DEV" -- --flows "$FLOWS" --burst "$BURST" \
    >"$work/peer.log" 2>&1 &
  vg=$!
  warm_up "$vg" summarise_peer
  [ "$warm" -ge $(( 2 * FLOWS )) ] || { cat "$work/peer.log"; echo "bench-instructions.sh: the peer stopped after $warm packets" >&2; exit 1; }
  sleep "$SECONDS_PER_RUN"
  kill -INT "$vg" || true
  wait "$vg" || { cat "$work/peer.log"; exit 1; }
  rm -rf "/var/run/dpdk/bench-instr-peer-$$"
  # The worker thread: the file with the peer's `worker` in it.
  worker=$(grep -lE '^c?fn=\([0-9]+\) worker$' "$work"/cg."$vg"-* | head -1)
  read -r rx tx self callees drivers total < <(summarise_peer "$worker")
  # Over the whole run (every dump of the worker thread): a TX burst for
  # every RX one, so every RX burst was full.
  all_rx=0; all_tx=0
  for f in "$work"/cg."$vg".*-"${worker##*-}" "$worker"; do
    read -r r t _ < <(summarise_peer "$f")
    all_rx=$(( all_rx + r )); all_tx=$(( all_tx + t ))
  done
  [ "$all_rx" -eq "$all_tx" ] || {
    echo "bench-instructions.sh: the peer's worker made $all_rx RX calls, $all_tx TX calls" >&2
    exit 1
  }
  packets=$(( rx * BURST ))
  [ "$packets" -gt 0 ] || { echo "bench-instructions.sh: no packets after the warm-up" >&2; exit 1; }
  awk -v n="$packets" -v s="$self" -v c="$callees" -v d="$drivers" -v t="$total" 'BEGIN {
    printf "burst_instructions_per_packet=%.1f driver_instructions_per_packet=%.1f packets=%d thread_total_per_packet=%.1f\n",
      (s + c) / n, d / n, n, t / n }'
  exit 0
fi

valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.%p" \
  "${SLUICE_BIN:-target/release/sluice}" run --config "$work/bench.toml" \
  --no-metrics-server --no-control-socket --duration "$SECONDS_PER_RUN" \
  --metrics-dump "$work/metrics.txt" >"$work/sluice.log" 2>&1 &
vg=$!
warm_up "$vg" summarise
wait "$vg" || { cat "$work/sluice.log"; exit 1; }
[ "$warm" -ge $(( 2 * FLOWS )) ] || {
  echo "bench-instructions.sh: only $warm packets before the end; raise SECONDS_PER_RUN" >&2
  exit 1
}
# The last dump's worker thread: the file with the burst path in it.
worker=$(grep -l '::handle_burst' "$work"/cg."$vg"-* | head -1)
read -r bursts self callees drivers total < <(summarise "$worker")
packets=$(( bursts * BURST ))
counted=$(awk -v m="$COUNTED" '$1 == m {print $2}' "$work/metrics.txt")
[ "$counted" -eq $(( packets + warm )) ] || {
  echo "bench-instructions.sh: $counted packets counted, $(( packets + warm )) in full bursts" >&2
  exit 1
}
[ "$packets" -gt 0 ] || { echo "bench-instructions.sh: no packets after the warm-up; raise SECONDS_PER_RUN" >&2; exit 1; }
awk -v n="$packets" -v s="$self" -v c="$callees" -v d="$drivers" -v t="$total" 'BEGIN {
  printf "burst_instructions_per_packet=%.1f driver_instructions_per_packet=%.1f packets=%d burst_self_per_packet=%.1f thread_total_per_packet=%.1f\n",
    (s + c) / n, d / n, n, s / n, t / n }'
