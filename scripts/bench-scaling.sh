#!/usr/bin/env bash
# Scaling across workers: scripts/bench-throughput.sh with one worker on
# one RX queue, then with WORKERS=2 (two RX queues, each replaying the
# flows one worker owns, as RSS on the address pair delivers them; nothing
# is steered), each run against dpdk-testpmd io on the same queues and
# cores. ROUNDS (default 3) alternates the two so a change in machine
# load touches both; TRAFFIC, FLOWS, SECONDS_PER_RUN, SLUICE_BIN as in
# bench-throughput.sh. One line per round, then the medians:
#   round=R sluice1_mpps=A testpmd1_mpps=B sluice2_mpps=C testpmd2_mpps=D sluice_scaling=C/A testpmd_scaling=D/B
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
rates() {  # WORKERS → "sluice_mpps testpmd_mpps"
  WORKERS=$1 scripts/bench-throughput.sh 2>&1 | grep '^sluice_mpps=' | tail -1 \
    | sed -E 's/^sluice_mpps=([0-9.]+) testpmd_io_mpps=([0-9.]+).*/\1 \2/'
}
results=""
for round in $(seq 1 "$ROUNDS"); do
  read -r s1 t1 < <(rates 1)
  read -r s2 t2 < <(rates 2)
  line=$(awk -v r="$round" -v a="$s1" -v b="$t1" -v c="$s2" -v d="$t2" 'BEGIN {
    printf "round=%d sluice1_mpps=%.3f testpmd1_mpps=%.3f sluice2_mpps=%.3f testpmd2_mpps=%.3f sluice_scaling=%.3f testpmd_scaling=%.3f",
      r, a, b, c, d, (a > 0 ? c / a : 0), (b > 0 ? d / b : 0) }')
  echo "$line"
  results+="$line"$'\n'
done
printf '%s' "$results" | awk '
  function med(a, n,   i, j, x) {
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return a[int((n + 1) / 2)]
  }
  { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1], NR] = kv[2] } n = NR }
  END {
    split("sluice1_mpps testpmd1_mpps sluice2_mpps testpmd2_mpps sluice_scaling testpmd_scaling", k, " ")
    printf "median"
    for (f = 1; f <= 6; f++) { for (i = 1; i <= n; i++) col[i] = v[k[f], i]; printf " %s=%.3f", k[f], med(col, n) }
    printf "\n"
  }'
