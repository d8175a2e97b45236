#!/usr/bin/env bash
# Scaling across workers: the throughput harness (scripts/bench-throughput.sh)
# with one worker on one RX queue, then two workers on two RX queues, each
# against dpdk-testpmd io on the same devices and queue/core layout, in one
# invocation.
#
# Two queues: one net_pcap port with two rx_pcap files (infinite_rx=1), each
# holding FLOWS/2 flows that one worker owns (`pktgen --owner=K/2`, the
# address-pair hash of `sluice_core::steering`). That is what a NIC's RSS on
# addresses delivers (docs/architecture.md, "Connection tracking"): every
# packet arrives at the worker that owns its flow. net_pcap has no RSS, so
# sluice turns software steering on and checks every packet's owner, and
# `sluice_steered_packets_total` shows that none had to move.
#
# Cores: the machine's first two CPUs. Each forwarding lcore (testpmd's, or
# sluice's worker) gets a CPU of its own; the main lcore (testpmd's idle
# prompt, sluice's control loop) shares CPU 0 when there are two.
#
# TRAFFIC (tcp, syn, udp, drop; default tcp), FLOWS (default 100000),
# SECONDS_PER_RUN (default 8), WARMUP (default 3), ROUNDS (default 1):
# rounds alternate the four runs so that a change in machine load touches
# all of them. SLUICE_BIN as in bench-throughput.sh.
# One line per round:
#   round=R testpmd1_mpps=A sluice1_mpps=B testpmd2_mpps=C sluice2_mpps=D
#   sluice_scaling=D/B testpmd_scaling=C/A ratio1=B/A ratio2=D/C steered=S
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-config.sh
scripts/setup.sh >/dev/null

FLOWS=${FLOWS:-100000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-8}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-1}
BURST=${BURST:-32}
TRAFFIC=${TRAFFIC:-tcp}
ENCAP=${ENCAP:-gre}
METRICS_LISTEN=${METRICS_LISTEN:-127.0.0.1:19107}
[ "$(nproc)" -ge 2 ] || { echo "bench-scaling.sh: needs two CPUs" >&2; exit 2; }
bench_traffic
work=$(mktemp -d /tmp/sluice-scaling.XXXXXX)
trap 'rm -rf "$work"' EXIT

bench_flows "$work"   # builds the binaries; $work/flows.pcap: FLOWS flows
half=$((FLOWS / 2))
for k in 0 1; do
  target/release/pktgen "$half" "$work/owner$k.pcap" "$DST" 02:00:00:00:00:01 $GEN_FLAG \
    --owner=$k/2 2>/dev/null
done
ONE_RX="$RX_DEV"
TWO_RX="net_pcap0,rx_pcap=$work/owner0.pcap,rx_pcap=$work/owner1.pcap,infinite_rx=1"

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print 0}'; }

# testpmd io on RX (one or two queues): the median of port 1's Tx-pps.
testpmd_pps() {
  local rx=$1 queues=$2 lcores=0@0,1@1
  [ "$queues" = 2 ] && lcores=0@0,1@0,2@1
  timeout -s INT $((SECONDS_PER_RUN + WARMUP + 5)) dpdk-testpmd --no-huge -m "$MEM" --no-pci \
    --file-prefix=bench-sc-$$ --lcores=$lcores --log-level=error \
    --vdev="$rx" --vdev="$TX_DEV" -- \
    --forward-mode=io --burst="$BURST" --total-num-mbufs="$MBUFS" --no-mlockall \
    --rxq="$queues" --txq="$queues" --nb-cores="$queues" --stats-period=1 -a \
    > "$work/testpmd.log" 2>&1 &
  local tp=$!
  sleep $((SECONDS_PER_RUN + WARMUP))
  kill -INT $tp 2>/dev/null || true
  wait $tp 2>/dev/null || true
  rm -rf /var/run/dpdk/bench-sc-$$
  awk '/statistics for port 1 / {p=1} /statistics for port 0 / {p=0} p && /Tx-pps:/ {print $2}' \
    "$work/testpmd.log" | tail -n +$((WARMUP + 1)) | median
}

# sluice with WORKERS workers on RX: forwarded (or for drop, received)
# packets per second over SECONDS_PER_RUN after WARMUP.
sluice_pps() {
  local rx=$1 workers=$2 lcores=0@0,1@1
  [ "$workers" = 2 ] && lcores=0@0,1@0,2@1
  RX_DEV=$rx NOHUGE=--no-huge bench_config "$work/bench.toml"
  sed -i -e "s/^workers = 1$/workers = $workers/" \
    -e "s/^eal_args = \[/eal_args = [\"--lcores=$lcores\", /" "$work/bench.toml"
  "${SLUICE_BIN:-target/release/sluice}" run --config "$work/bench.toml" \
    --no-control-socket --duration $((SECONDS_PER_RUN + WARMUP + 2)) \
    --metrics-dump "$work/metrics-$workers.txt" > "$work/sluice.log" 2>&1 &
  local sl=$!
  local metric="$COUNTED"
  count() { curl -s "http://$METRICS_LISTEN/metrics" | awk -v m="$metric" '$1 == m {print $2}'; }
  sleep "$WARMUP"
  local t0 c0 t1 c1
  t0=$(date +%s.%N); c0=$(count)
  sleep "$SECONDS_PER_RUN"
  t1=$(date +%s.%N); c1=$(count)
  wait $sl || { cat "$work/sluice.log" >&2; exit 1; }
  echo "$c0 $c1 $t0 $t1" | awk '{printf "%.0f\n", ($2 - $1) / ($4 - $3)}'
}

for round in $(seq 1 "$ROUNDS"); do
  tp1=$(testpmd_pps "$ONE_RX" 1)
  sl1=$(sluice_pps "$ONE_RX" 1)
  tp2=$(testpmd_pps "$TWO_RX" 2)
  sl2=$(sluice_pps "$TWO_RX" 2)
  steered=$(awk '$1 ~ /^sluice_steered_packets_total/ && $1 ~ /out/ {s += $2} END {print s + 0}' \
    "$work/metrics-2.txt")
  awk -v r="$round" -v a="$tp1" -v b="$sl1" -v c="$tp2" -v d="$sl2" -v s="$steered" \
    -v t="$TRAFFIC" -v f="$FLOWS" 'BEGIN {
    printf "round=%d traffic=%s flows=%d testpmd1_mpps=%.3f sluice1_mpps=%.3f testpmd2_mpps=%.3f sluice2_mpps=%.3f",
      r, t, f, a / 1e6, b / 1e6, c / 1e6, d / 1e6
    printf " sluice_scaling=%.3f testpmd_scaling=%.3f ratio1=%.3f ratio2=%.3f steered=%d\n",
      (b > 0 ? d / b : 0), (a > 0 ? c / a : 0), (a > 0 ? b / a : 0), (c > 0 ? d / c : 0), s }'
done
