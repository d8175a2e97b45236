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
# per_ms_upkeep_per_packet: of that, the worker's once-a-millisecond
# upkeep (`poll::upkeep`: 1,024 conntrack slots examined, the counters
# published), which follows time, not packets: under callgrind a
# millisecond holds a few hundred packets where a real core forwards
# thousands, so this figure is some 20-50 times what it is natively;
# subtract it for the poll loop's cost per packet.
# own_per_packet, own_without_upkeep_per_packet (HARNESS=ring only, where
# the drivers' figure is inclusive): the thread's total less the drivers,
# with and without the upkeep — sluice's own code, the figure compared
# with the peer's own (its burst_instructions_per_packet).
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
# HARNESS=ring (scripts/bench-config.sh): the clients port is net_ring0,
# the backends port net_ring1, whose TX queues the feeder takes over and
# recycles what was transmitted into the clients' RX ring (the
# feeder: benches/ring-feeder/ring_feeder.c, a
# DPDK secondary process started next to the valgrind'ed primary (sluice
# or the peer) with the primary's --file-prefix, on hugepages (valgrind's
# address placement did not get in the way: the secondary maps the
# primary's memory at its addresses without --base-virtaddr). The feeder
# runs under SCHED_FIFO, sleeping 100 us whenever the ring is full, until
# the primary has exited. It enqueues whole bursts of BURST into a ring
# the worker dequeues BURST at a time, so every RX burst is full or
# empty. Empty ones happen: before the feeder has found the started port,
# and whenever the feeder is off its CPU longer than the worker takes to
# drain the ring (992 packets, ~1.5 ms under callgrind; this VM keeps even
# a SCHED_FIFO thread off for 0.3-6 ms about once a second). So after the
# warm-up (counted in bursts with packets: sluice's handle_burst calls,
# the peer's TX calls) callgrind dumps every 0.2 s, and the figures are
# the sums over the dumps of the worker thread in which every RX call of
# the ring had a burst (sluice: RX calls = handle_burst calls; the peer:
# RX calls = TX calls); dumps=K/N on the last line says how many of them.
# sluice's check becomes: over the whole run, the packets the metrics
# counted are the handle_burst calls times BURST.
# driver_instructions_per_packet is then INCLUSIVE: on the worker thread,
# the cost of every call into librte_net_ring (its RX burst function, a
# ring dequeue, on both ports for sluice, the backends' empty; its TX
# burst function, a ring enqueue) from outside that object, with
# everything it calls. net_ring's object is stripped: callgrind names its
# functions by offset, and the feeder prints which offset is RX and
# which TX (ring_functions). Not in it: the
# ethdev dispatch in the caller (rte_eth_rx_burst and rte_eth_tx_burst,
# inlined there or in the binary's shim: a few loads and an indirect
# call). The ring harness's budget for it is 40 per packet (the script
# says on stderr when it is over). Extra fields on the last line:
# harness=ring driver_rx_per_packet=R driver_tx_per_packet=X
# driver_self_per_packet=S dumps=K/N: R the part of net_ring's RX, X the
# rest (its TX), S the drivers' self cost alone (the pcap harness's
# measure).
# TRAFFIC=tcp (default) | syn | udp | drop, as in bench-throughput.sh; the
# traffic, devices and configuration are scripts/bench-config.sh's.
# SLUICE_BIN: the binary (default target/release/sluice, built here).
# ENCAP: the services' encapsulation (default gre; vxlan gets a vxlan_mac).
# KEEP=1: the work directory (callgrind files, metrics) is kept and named.
# CALLGRIND_EXTRA: more callgrind options, e.g. `--dump-instr=yes` for
# scripts/profile-lines.py (the figures are the same either way).
# Last line: burst_instructions_per_packet=X driver_instructions_per_packet=Y
#   packets=N burst_self_per_packet=Z thread_total_per_packet=T
#   (PEER=1: burst_instructions_per_packet=X driver_instructions_per_packet=Y
#   packets=N thread_total_per_packet=T)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-config.sh

FLOWS=${FLOWS:-20000}
HARNESS=${HARNESS:-pcap}
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
if [ -n "${KEEP:-}" ]; then echo "work=$work" >&2; trap bench_feeder_stop EXIT
else trap 'bench_feeder_stop; rm -rf "$work"' EXIT; fi

bench_flows "$work"
# The drivers' objects: net_pcap's RX and net_null's TX, or net_ring's
# RX and TX.
DRIVERS="librte_net_(pcap|null)"
NOHUGE=--no-huge
if [ "$HARNESS" = ring ]; then
  DRIVERS="librte_net_(ring|null)"
  NOHUGE=""
  bench_hugepages >/dev/null
  bench_feeder >/dev/null
  # valgrind starts EAL slowly: the feeder waits for it longer.
  export FEEDER_WAIT=${FEEDER_WAIT:-300} FEEDER_SLOW=${FEEDER_SLOW:-1}
  FILE_PREFIX=bench-instr-$$
fi
# The ring harness: which of net_ring's functions is RX and which TX (its
# shared object is stripped: callgrind names them by offset), from the
# feeder's log once it has taken over the TX queues; and sluice polls two
# ring ports' RX (clients and backends), so its RX calls are twice its
# polls.
RING_RX_FN="" RING_TX_FN="" RING_RX_PORTS=""
ring_functions() {
  local line="" i
  for ((i = 0; i < FEEDER_WAIT * 10; i++)); do
    line=$(grep -m1 '^ring-burst-functions:' "$1" 2>/dev/null || true)
    [ -n "$line" ] && break
    kill -0 "$FEEDER_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$line" ] || { cat "$1" >&2; echo "bench-instructions.sh: the feeder did not take over the TX queues" >&2; exit 1; }
  RING_RX_FN=$(echo "$line" | sed -E 's/.* rx=([0-9a-fx]+).*/\1/')
  RING_TX_FN=$(echo "$line" | sed -E 's/.* tx=([0-9a-fx]+).*/\1/')
  RING_RX_PORTS=2
}
NOHUGE=$NOHUGE ENCAP=${ENCAP:-gre} CT_CAPACITY=131072 METRICS_LISTEN="" FILE_PREFIX=${FILE_PREFIX:-} \
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
# drivers' self cost, the total (every self cost), the drivers'
# inclusive cost (calls into DRIVERS' objects from outside them), the
# calls of net_ring's RX function, their inclusive cost, and the
# inclusive cost of the worker's per-millisecond upkeep (`poll::upkeep`)
# of one file.
summarise() {
  awk -v drv="$DRIVERS" -v rxfn="$RING_RX_FN" -v ports="$RING_RX_PORTS" "$NAMED"'
    BEGIN { np = 1 }
    /^positions:/ { np = NF - 1; next }
    /^fn=/ { fn = named("fn", substr($0, 4)); cob = ""; next }
    /^cfn=/ { cfn = named("fn", substr($0, 5)); next }
    /^ob=/ { ob = named("ob", substr($0, 4)); cob = ""; next }
    /^cob=/ { cob = named("ob", substr($0, 5)); next }
    /^calls=/ {
      call = 1; callee = (cob == "") ? ob : cob
      split($1, c, "=")
      ring_rx = callee ~ /librte_net_ring/ && ob !~ drv && (rxfn == "" || cfn == rxfn)
      if (cfn ~ /::handle_burst$/) bursts += c[2]
      if (ring_rx) ringrx += c[2]
      next
    }
    /^[0-9+*-]/ {
      cost = ($(np + 1) == "") ? 0 : $(np + 1)
      in_burst = fn ~ /::handle_burst$/
      if (call) {
        call = 0
        # A full TX lane sent from within the burst: the driver figure.
        if (in_burst && cfn !~ /rte_eth_tx_burst/) callees += cost
        if (callee ~ drv && ob !~ drv) incl += cost
        if (ring_rx) rxincl += cost
        if (cfn ~ /worker::poll::upkeep$/) upkeep += cost
        cob = ""
      } else {
        if (in_burst) self += cost
        if (ob ~ drv) drivers += cost
        total += cost
      }
    }
    END { printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", bursts, self, callees, drivers, total, incl, ringrx / (ports ? ports : 1), rxincl, upkeep }' "$1"
}

# The same for the peer: its worker's calls of the net_pcap (or
# net_ring) RX and the net_null (or net_ring) TX burst functions (a call's object is
# `cob=`'s, else the caller's), the worker's self cost and the inclusive
# cost of its calls other than those, the drivers' self cost, the total,
# the drivers' inclusive cost and net_ring RX's of one file.
summarise_peer() {
  awk -v drv="$DRIVERS" -v rxfn="$RING_RX_FN" -v txfn="$RING_TX_FN" "$NAMED"'
    BEGIN { np = 1 }
    /^positions:/ { np = NF - 1; next }
    /^fn=/ { fn = named("fn", substr($0, 4)); cob = ""; next }
    /^cfn=/ { cfn = named("fn", substr($0, 5)); next }
    /^ob=/ { ob = named("ob", substr($0, 4)); cob = ""; next }
    /^cob=/ { cob = named("ob", substr($0, 5)); next }
    /^calls=/ {
      call = 1; split($1, c, "="); callee = (cob == "") ? ob : cob
      ring_rx = callee ~ /librte_net_ring/ && ob !~ drv && (rxfn == "" || cfn == rxfn)
      ring_tx = callee ~ /librte_net_ring/ && txfn != "" && cfn == txfn
      if (fn == "worker" && (callee ~ /librte_net_pcap/ || ring_rx)) rx += c[2]
      if (fn == "worker" && (callee ~ /librte_net_null/ || ring_tx)) tx += c[2]
      next
    }
    /^[0-9+*-]/ {
      cost = ($(np + 1) == "") ? 0 : $(np + 1)
      if (call) {
        call = 0
        if (fn == "worker" && callee !~ drv) callees += cost
        if (callee ~ drv && ob !~ drv) incl += cost
        if (ring_rx) rxincl += cost
        cob = ""
      } else {
        if (fn == "worker") self += cost
        if (ob ~ drv) drivers += cost
        total += cost
      }
    }
    END { printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", rx, tx, self, callees, drivers, total, incl, rxincl }' "$1"
}

# The peer's TX calls first (the ring harness's warm-up count).
summarise_peer_sent() { summarise_peer "$1" | awk '{print $2}'; }

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

# The ring harness's measured interval: after the warm-up, a dump every
# 0.2 s for $2 seconds (or, $2 empty, until process $1 exits), so that the
# fractions of a second in which its ring ran dry can be left out
# (sum_full): on this VM the feeder, even under SCHED_FIFO, is off its CPU
# for 0.3-6 ms about once a second, and a worker under callgrind drains
# the ring's 992 packets in ~1.5 ms.
dump_seconds() {
  local i=0
  while kill -0 "$1" 2>/dev/null && { [ -z "$2" ] || [ "$i" -lt $(( $2 * 5 )) ]; }; do
    sleep 0.2
    callgrind_control -d "$1" >/dev/null 2>&1 || true
    i=$(( i + 1 ))
  done
}
# The number of the last dump of callgrind run $1 so far (0: none).
last_dump() {
  local f n=0 k
  for f in "$work"/cg."$1".*-*; do
    [ -e "$f" ] || continue
    k=${f##*/cg."$1".}; k=${k%%-*}
    [ "$k" -gt "$n" ] && n=$k
  done
  echo "$n"
}
# The dumps of run $1's thread $3 after dump $2: the per-second ones, then
# the one written at exit.
dumps_after() {
  local f k
  for f in "$work"/cg."$1".*-"$3"; do
    k=${f##*/cg."$1".}; k=${k%%-*}
    [ "$k" -gt "$2" ] && echo "$k $f"
  done | sort -n | awk '{print $2}'
  echo "$work/cg.$1-$3"
}
# Sums the figures summary function $1 prints for each dump (the rest
# of the arguments) over the dumps where figure $2 equals figure $3 (an RX
# call for every burst: the ring never ran dry) and is not 0; prints the
# sums, the dumps summed and the dumps.
sum_full() {
  local fn=$1 a=$2 b=$3 f
  shift 3
  for f in "$@"; do "$fn" "$f"; done | awk -v a="$a" -v b="$b" '
    { n++; if (NF > m) m = NF; if ($a == $b && $a > 0) { k++; for (i = 1; i <= NF; i++) s[i] += $i } }
    END { for (i = 1; i <= m; i++) printf "%.0f ", s[i]; printf "%d %d\n", k, n }'
}

# The result's driver figure and extra fields: the drivers' self cost
# (pcap), or their inclusive cost (ring: see above).
driver_figure() {
  local n=$1 self=$2 incl=$3 rx=$4
  if [ "$HARNESS" = ring ]; then
    awk -v n="$n" -v s="$self" -v i="$incl" -v r="$rx" 'BEGIN {
      printf "%.1f harness=ring driver_rx_per_packet=%.1f driver_tx_per_packet=%.1f driver_self_per_packet=%.1f\n", i / n, r / n, (i - r) / n, s / n
      if (i / n > 40) printf "bench-instructions.sh: on the ring harness the drivers cost %.1f instructions per packet, over 40\n", i / n > "/dev/stderr" }'
  else
    awk -v n="$n" -v s="$self" 'BEGIN { printf "%.1f\n", s / n }'
  fi
}

if [ "${PEER:-0}" = 1 ]; then
  peer=$(bench_peer)
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.%p" ${CALLGRIND_EXTRA:-} \
    $peer $NOHUGE -m "$MEM" --no-pci --file-prefix=bench-instr-peer-$$ --lcores=0@0,1@1 \
    --log-level=error --vdev="$RX_DEV" --vdev="$TX_DEV" -- --flows "$FLOWS" --burst "$BURST" \
    >"$work/peer.log" 2>&1 &
  vg=$!
  if [ "$HARNESS" = ring ]; then
    bench_feeder_start bench-instr-peer-$$ peer_pool "$work/feeder.log"
    ring_functions "$work/feeder.log"
  fi
  if [ "$HARNESS" = ring ]; then warm_up "$vg" summarise_peer_sent; else warm_up "$vg" summarise_peer; fi
  [ "$warm" -ge $(( 2 * FLOWS )) ] || { cat "$work/peer.log"; echo "bench-instructions.sh: the peer stopped after $warm packets" >&2; exit 1; }
  if [ "$HARNESS" = ring ]; then
    warm_dumps=$(last_dump "$vg")
    dump_seconds "$vg" "$SECONDS_PER_RUN"
  else
    sleep "$SECONDS_PER_RUN"
  fi
  kill -INT "$vg" || true
  wait "$vg" || { cat "$work/peer.log"; exit 1; }
  # The ring harness: the feeder kept the ring full until the peer exited.
  bench_feeder_stop
  rm -rf "/var/run/dpdk/bench-instr-peer-$$"
  [ "$HARNESS" = ring ] && bench_dpdk_clean "bench-instr-peer-$$"
  # The worker thread: the file with the peer's `worker` in it.
  if [ "$HARNESS" = ring ]; then
    worker=$(grep -lE '^c?fn=\([0-9]+\) worker$' "$work"/cg."$vg".*-* | sed -n 1p | sed -E 's/\.[0-9]+(-[0-9]+)$/\1/')
  else
    worker=$(grep -lE '^c?fn=\([0-9]+\) worker$' "$work"/cg."$vg"-* | sed -n 1p)
  fi
  used=""
  if [ "$HARNESS" = ring ]; then
    # The ring harness: the worker polls the ring before the feeder has
    # found the started port, so the run begins with empty RX calls, and
    # on a loaded machine the feeder may be off its CPU for milliseconds,
    # long enough for the worker to drain the ring. The warm-up counted
    # TX calls (one per non-empty, hence full, RX burst); the figures are
    # the sum of the measured seconds in which every RX call had its TX.
    mapfile -t files < <(dumps_after "$vg" "$warm_dumps" "${worker##*-}")
    read -r rx tx self callees drivers total incl rxincl k n < <(sum_full summarise_peer 1 2 "${files[@]}")
    used=" dumps=$k/$n"
  else
    read -r rx tx self callees drivers total incl rxincl < <(summarise_peer "$worker")
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
  fi
  packets=$(( rx * BURST ))
  [ "$packets" -gt 0 ] || { echo "bench-instructions.sh: no packets after the warm-up" >&2; exit 1; }
  read -r driver driver_extra < <(driver_figure "$packets" "$drivers" "$incl" "$rxincl")
  awk -v n="$packets" -v s="$self" -v c="$callees" -v d="$driver" -v t="$total" -v x="${driver_extra:+ $driver_extra}$used" 'BEGIN {
    printf "burst_instructions_per_packet=%.1f driver_instructions_per_packet=%s packets=%d thread_total_per_packet=%.1f%s\n",
      (s + c) / n, d, n, t / n, x }'
  exit 0
fi

valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.%p" ${CALLGRIND_EXTRA:-} \
  "${SLUICE_BIN:-target/release/sluice}" run --config "$work/bench.toml" \
  --no-metrics-server --no-control-socket --duration "$SECONDS_PER_RUN" \
  --metrics-dump "$work/metrics.txt" >"$work/sluice.log" 2>&1 &
vg=$!
if [ "$HARNESS" = ring ]; then
  bench_feeder_start "$FILE_PREFIX" sluice_mbufs "$work/feeder.log"
  ring_functions "$work/feeder.log"
fi
warm_up "$vg" summarise
if [ "$HARNESS" = ring ]; then
  warm_dumps=$(last_dump "$vg")
  dump_seconds "$vg" ""
fi
wait "$vg" || { cat "$work/sluice.log"; exit 1; }
# The ring harness: the feeder kept the ring full until sluice exited.
if [ "$HARNESS" = ring ]; then
  bench_feeder_stop
  bench_dpdk_clean "$FILE_PREFIX"
fi
[ "$warm" -ge $(( 2 * FLOWS )) ] || {
  echo "bench-instructions.sh: only $warm packets before the end; raise SECONDS_PER_RUN" >&2
  exit 1
}
# The last dump's worker thread: the file with the burst path in it.
# The ring harness: the dumps a fifth of a second apart hold the measured
# interval, the one at exit may hold nothing of the burst path; the
# thread's final file by the name of one of them. (`sed -n 1p`, not
# `head -1`: head exits at once, and grep, still writing, then dies of
# SIGPIPE, which pipefail makes the script's exit.)
if [ "$HARNESS" = ring ]; then
  worker=$(grep -l '::handle_burst' "$work"/cg."$vg".*-* | sed -n 1p | sed -E 's/\.[0-9]+(-[0-9]+)$/\1/')
else
  worker=$(grep -l '::handle_burst' "$work"/cg."$vg"-* | sed -n 1p)
fi
counted=$(awk -v m="$COUNTED" '$1 == m {print $2}' "$work/metrics.txt")
used=""
if [ "$HARNESS" = ring ]; then
  # As for the peer: the measured seconds in which every RX call of the
  # ring had a burst (the start-up's empty ones are before the warm-up's
  # end; a loaded machine may keep the feeder off its CPU long enough for
  # the ring to run dry). Over the whole run, every burst was full.
  mapfile -t files < <(dumps_after "$vg" "$warm_dumps" "${worker##*-}")
  read -r bursts self callees drivers total incl _ rxincl upkeep k n < <(sum_full summarise 1 7 "${files[@]}")
  used=" dumps=$k/$n"
  packets=$(( bursts * BURST ))
  all=0
  for f in "$work"/cg."$vg".*-"${worker##*-}" "$worker"; do
    read -r b _ < <(summarise "$f")
    all=$(( all + b ))
  done
  [ "$counted" -eq $(( all * BURST )) ] || {
    echo "bench-instructions.sh: $counted packets counted, $(( all * BURST )) in full bursts" >&2
    exit 1
  }
else
  read -r bursts self callees drivers total incl _ rxincl upkeep < <(summarise "$worker")
  packets=$(( bursts * BURST ))
  [ "$counted" -eq $(( packets + warm )) ] || {
    echo "bench-instructions.sh: $counted packets counted, $(( packets + warm )) in full bursts" >&2
    exit 1
  }
fi
[ "$packets" -gt 0 ] || { echo "bench-instructions.sh: no packets after the warm-up; raise SECONDS_PER_RUN" >&2; exit 1; }
read -r driver driver_extra < <(driver_figure "$packets" "$drivers" "$incl" "$rxincl")
# On the ring harness the drivers' figure is inclusive, so the thread less
# it is sluice's own code (burst path and poll loop), the figure compared
# with the peer's; also given without the upkeep, which follows time.
own=""
if [ "$HARNESS" = ring ]; then
  own=$(awk -v n="$packets" -v d="$driver" -v t="$total" -v u="$upkeep" 'BEGIN {
    printf " own_per_packet=%.1f own_without_upkeep_per_packet=%.1f", t / n - d, t / n - d - u / n }')
fi
awk -v n="$packets" -v s="$self" -v c="$callees" -v d="$driver" -v t="$total" -v u="$upkeep" -v x="${driver_extra:+ $driver_extra}$used$own" 'BEGIN {
  printf "burst_instructions_per_packet=%.1f driver_instructions_per_packet=%s packets=%d burst_self_per_packet=%.1f thread_total_per_packet=%.1f per_ms_upkeep_per_packet=%.1f%s\n",
    (s + c) / n, d, n, s / n, t / n, u / n, x }'
