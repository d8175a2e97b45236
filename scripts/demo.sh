#!/usr/bin/env bash
# The live demo: a real network in namespaces (client, sluice, three HTTP
# backends joined by a bridge), sluice on real DPDK (net_af_packet on a veth,
# its exception path on a TAP), layer-2 direct server return. Prints the
# per-backend spread of new connections live, stops a backend and shows the
# failover and the recovery, reloads the configuration to add a fourth
# backend, and prints a slice of /metrics. Cleans up on exit or Ctrl-C.
# Needs root (namespaces); `scripts/demo-pcap.sh` replays a pcap instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null

echo "== building sluice"
cargo build --locked -q -p controlplane
exec python3 scripts/e2e/demo.py --sluice target/debug/sluice "$@"
