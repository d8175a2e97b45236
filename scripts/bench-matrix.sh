#!/usr/bin/env bash
# The throughput matrix of docs/performance.md in one command: every
# TRAFFIC (tcp, syn, udp, drop) at 100,000 flows under --no-huge and at
# 1,000,000 flows on 2 MB hugepages (HUGE=1, reserved and mounted by
# bench-throughput.sh), each one scripts/bench-throughput.sh invocation
# with dpdk-testpmd io measured in it, and the C peer (PEER=1) where it
# applies (tcp and syn). ROUNDS (default 1) repeats the matrix, cell by
# cell in turn, so a change in the machine's load touches every cell; the
# table gives each cell's median ratio.
#
# CELLS: a subset, e.g. CELLS="tcp/100000 syn/1000000" (default: all
# eight). SECONDS_PER_RUN as in bench-throughput.sh (default 8).
# HARNESSES: the harnesses each cell runs on, in turn (default: HARNESS,
# default pcap; bench-throughput.sh's HARNESS), e.g. HARNESSES="pcap ring";
# the ring harness runs every cell on hugepages. With any other than pcap
# alone, the table has a harness column after traffic.
# Prints one line per run as it goes, then a Markdown table:
#   | flows | traffic | sluice Mpps | testpmd io Mpps | ratio | C peer ratio | sluice / peer |
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
export SECONDS_PER_RUN=${SECONDS_PER_RUN:-8}
CELLS=${CELLS:-"tcp/100000 syn/100000 udp/100000 drop/100000 tcp/1000000 syn/1000000 udp/1000000 drop/1000000"}
HARNESSES=${HARNESSES:-${HARNESS:-pcap}}
for h in $HARNESSES; do
  case "$h" in pcap|ring) ;; *) echo "HARNESSES: pcap and/or ring" >&2; exit 2 ;; esac
done
results=$(mktemp /tmp/sluice-matrix.XXXXXX)
trap 'rm -f "$results"' EXIT

for round in $(seq 1 "$ROUNDS"); do
  for cell in $CELLS; do
    traffic=${cell%/*} flows=${cell#*/}
    huge=0; [ "$flows" -gt 100000 ] && huge=1
    peer=0; case "$traffic" in tcp|syn) peer=1 ;; esac
    for h in $HARNESSES; do
      line=$(HARNESS=$h TRAFFIC=$traffic FLOWS=$flows HUGE=$huge PEER=$peer scripts/bench-throughput.sh 2>&1 \
             | grep '^sluice_mpps=' | tail -1)
      if [ "$HARNESSES" = pcap ]; then
        echo "round=$round traffic=$traffic flows=$flows $line"
      else
        echo "round=$round traffic=$traffic flows=$flows harness=$h $line"
      fi
      echo "$flows $traffic $h $line" >> "$results"
    done
  done
done

echo
if [ "$HARNESSES" = pcap ]; then
  echo "| flows | traffic | sluice Mpps | testpmd io Mpps | ratio | C peer ratio | sluice / peer |"
  echo "|---|---|---|---|---|---|---|"
else
  echo "| flows | traffic | harness | sluice Mpps | testpmd io Mpps | ratio | C peer ratio | sluice / peer |"
  echo "|---|---|---|---|---|---|---|---|"
fi
rows=""
for cell in $CELLS; do
  for h in $HARNESSES; do rows="$rows $cell/$h"; done
done
for row in $rows; do
  traffic=${row%%/*} h=${row##*/} flows=${row#*/}; flows=${flows%/*}
  col=""; [ "$HARNESSES" = pcap ] || col="$h | "
  awk -v f="$flows" -v t="$traffic" -v h="$h" -v col="$col" '
    function field(name,   i, kv) {
      for (i = 4; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
      return ""
    }
    function median(a, n,   i, j, x) {
      for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return n ? a[int((n + 1) / 2)] : 0
    }
    $1 == f && $2 == t && $3 == h {
      n++; s[n] = field("sluice_mpps")
      # A testpmd that printed no rate (0) says nothing about the ratio.
      if (field("testpmd_io_mpps") + 0 > 0) { k++; tp[k] = field("testpmd_io_mpps"); r[k] = field("ratio") }
      if (field("peer_ratio") + 0 > 0) { m++; pr[m] = field("peer_ratio"); vp[m] = field("sluice_vs_peer") }
    }
    END {
      peer = m ? sprintf("%.3f | %.3f", median(pr, m), median(vp, m)) : "— | —"
      printf "| %\047d | %s | %s%.2f | %.2f | %.3f | %s |\n", f, t, col, median(s, n), median(tp, k), median(r, k), peer
    }' "$results"
done
