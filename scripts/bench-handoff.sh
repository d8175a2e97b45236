#!/usr/bin/env bash
# What a restart with a full conntrack costs: FLOWS connections (default
# 1,000,000) handed from one sluice to the next through the hand-off file.
#
# Run A replays FLOWS 64-byte TCP packets (pktgen, one per flow, no SYN:
# the first packet of a key the shard does not hold opens its entry) once
# through net_pcap into WORKERS workers (default 1; 2: two RX queues, each
# with the flows its worker owns, as bench-config.sh splits them), waits
# until `sluice status --json` counts every packet forwarded, and is
# stopped by SIGTERM: it writes the hand-off file. Run B, the same
# configuration, takes the file, restores the entries into its shards,
# replays the same packets and stops when idle. Printed from the runs'
# own log lines and metrics:
#   write_ms        the stop's collection and writing of the file
#   file_bytes      its size
#   take_ms         the start's reading, checking and placing
#   restore_ms      the slowest worker's writing of its entries into its shard
#   stop_ms         from A's SIGTERM to its exit (workers stopped, file
#                   written, ports closed, EAL cleaned up)
#   start_ms        from B's first log line to its "worker(s) on lcores"
#                   line, when it is ready (EAL, pool, ports, conntrack
#                   shards reserved and touched, the take and the restore)
#   stop_to_ready_ms  from A's SIGTERM to B ready (both, and the process
#                   start between them)
#   b_inserts       conntrack inserts in run B (0: every packet found the
#                   connection handed over)
# Usage: FLOWS=1000000 WORKERS=1 scripts/bench-handoff.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FLOWS=${FLOWS:-1000000}
WORKERS=${WORKERS:-1}
TRAFFIC=tcp
BURST=32
ENCAP=gre
# shellcheck source=scripts/bench-config.sh
. scripts/bench-config.sh
bench_traffic

work=$(mktemp -d /tmp/sluice-handoff-bench.XXXXXX)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
pid=""
bench_flows "$work"
SLUICE=${SLUICE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}
# Read once, not for ever: run A's entries are exactly FLOWS.
RX_DEV=${RX_DEV/,infinite_rx=1/}
NOHUGE=1
# Frames stream from the file: a pool for the rings, not for every flow.
MBUFS=65535
MEM=768
CT_CAPACITY=$(( (FLOWS + WORKERS - 1) / WORKERS * 11 / 10 ))
bench_config "$work/sluice.toml"

ms() { date +%s%3N; }

"$SLUICE" run --config "$work/sluice.toml" --no-metrics-server \
  --control-socket "$work/a.sock" --handoff-file "$work/conntrack.handoff" \
  2>"$work/a.log" &
pid=$!
forwarded() {
  "$SLUICE" status --json --control-socket "$work/a.sock" 2>/dev/null |
    python3 -c 'import json,sys
try: v=json.load(sys.stdin)
except Exception: print(0); sys.exit()
print(sum(b.get("packets",0) for s in v.get("services",[]) for b in s.get("backends",[])))'
}
deadline=$(( $(date +%s) + 600 ))
until [ "$(forwarded)" -ge "$FLOWS" ]; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/a.log"; echo "bench-handoff: run A ended" >&2; exit 1; }
  [ "$(date +%s)" -lt "$deadline" ] || { echo "bench-handoff: run A never forwarded every flow" >&2; exit 1; }
  sleep 0.5
done
t_term=$(ms)
kill -TERM "$pid"
wait "$pid"
t_exit=$(ms)
pid=""
"$SLUICE" run --config "$work/sluice.toml" --no-metrics-server --no-control-socket \
  --handoff-file "$work/conntrack.handoff" --exit-on-idle 2000 \
  --metrics-dump "$work/b.prom" 2>"$work/b.log"

line() { grep -h "$1" "$2" | head -1; }
stamp_ms() { date -d "$(cut -d' ' -f1 <<<"$1")" +%s%3N; }
written=$(line "written for the next start" "$work/a.log")
taken=$(line "connection(s) taken from" "$work/b.log")
restored=$(line "restored into" "$work/b.log")
ready=$(line "worker(s) on lcores" "$work/b.log")
first=$(head -1 "$work/b.log")
[ -n "$written" ] && [ -n "$taken" ] && [ -n "$restored" ] || {
  cat "$work/a.log" "$work/b.log"; echo "bench-handoff: a hand-off line is missing" >&2; exit 1; }
echo "flows=$FLOWS workers=$WORKERS"
echo "written: ${written#* INFO }"
echo "taken: ${taken#* INFO }"
echo "restored: ${restored#* INFO }"
echo "write_ms=$(sed -E 's/.*bytes, ([0-9]+) ms.*/\1/' <<<"$written")" \
  "file_bytes=$(sed -E 's/.*\(([0-9]+) bytes.*/\1/' <<<"$written")" \
  "take_ms=$(sed -E 's/.*placed in ([0-9]+) ms.*/\1/' <<<"$taken")" \
  "restore_ms=$(sed -E 's/.* in ([0-9]+) ms.*/\1/' <<<"$restored")" \
  "stop_ms=$((t_exit - t_term))" \
  "start_ms=$(( $(stamp_ms "$ready") - $(stamp_ms "$first") ))" \
  "stop_to_ready_ms=$(( $(stamp_ms "$ready") - t_term ))" \
  "b_inserts=$(awk '$1=="sluice_conntrack_inserts_total"{print $2}' "$work/b.prom")"
