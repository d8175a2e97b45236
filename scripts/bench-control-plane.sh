#!/usr/bin/env bash
# Control-plane costs through the real binary on a big configuration
#: SERVICES services x BACKENDS backends (static MACs, table size
# TABLE), plus one service "probe" whose single backend is TCP-checked on a
# loopback port this script opens and closes.
#
# Prints, in milliseconds: `sluice status` (client round trip), `sluice
# reload` (round trip: parse, validate, build, publish), the health flip
# (the probe's port closes; the control thread's build + publish of that
# change, as `sluice_table_build_seconds` reports it, and the time from the
# port closing until `sluice status` shows the backend unhealthy, which
# includes the checker's 2 x 200 ms detection), and SIGTERM to exit.
# Timing never fails anything. Needs a release build:
#   cargo build --release -p controlplane --bin sluice
#   SERVICES=1 BACKENDS=100000 TABLE=655373 scripts/bench-control-plane.sh
#   SERVICES=10000 BACKENDS=10 TABLE=1021 scripts/bench-control-plane.sh
set -euo pipefail
cd "$(dirname "$0")/.."

SERVICES=${SERVICES:-1}
BACKENDS=${BACKENDS:-100000}
TABLE=${TABLE:-655373}
BIN=${BIN:-target/release/sluice}
DIR=$(mktemp -d /tmp/sluice-cp-bench.XXXXXX)
SOCK=$DIR/sluice.sock
METRICS_PORT=${METRICS_PORT:-19187}
PROBE_PORT=${PROBE_PORT:-19188}

python3 - "$DIR/sluice.toml" "$SERVICES" "$BACKENDS" "$TABLE" "$METRICS_PORT" "$PROBE_PORT" <<'EOF'
import sys
path, services, per, table, metrics, probe = sys.argv[1], *map(int, sys.argv[2:])
out = [f'''[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--log-level=error"]
workers = 1
[[dataplane.port]]
name = "p0"
device = "net_null0,no-rx=1"
mac = "02:00:00:00:00:01"
address = "10.0.0.1/8"
[metrics]
listen = "127.0.0.1:{metrics}"
[[health_check]]
name = "tcp"
type = "TCP"
port = {probe}
check_interval = "200ms"
timeout = "200ms"
healthy_threshold = 2
unhealthy_threshold = 2
[[backend_service]]
name = "probe"
health_check = "tcp"
backend = [{{ address = "127.0.0.1", mac = "02:00:00:00:00:02" }}]
''']
for i in range(services):
    out.append(f'[[backend_service]]\nname = "s{i}"\nmaglev_table_size = {table}\nbackend = [\n')
    for j in range(per):
        k = 256 + i * per + j
        out.append(f'  {{ address = "10.{(k >> 16) & 255}.{(k >> 8) & 255}.{k & 255}", mac = "02:00:00:00:00:01" }},\n')
    out.append(']\n')
out.append('[[forwarding_rule]]\nname = "vip"\nvip = "203.0.113.10"\nbackend_service = "s0"\n')
open(path, "w").write("".join(out))
EOF

ms() { date +%s%3N; }
# The probe target: a listener the script can close.
python3 -c "
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $PROBE_PORT)); s.listen(64)
s.settimeout(0.1)
while True:
    try: c, _ = s.accept(); c.close()
    except socket.timeout: pass
" &
LISTENER=$!

t0=$(ms)
"$BIN" run --config "$DIR/sluice.toml" --control-socket "$SOCK" 2>"$DIR/stderr" &
SLUICE=$!
trap 'kill $LISTENER 2>/dev/null || true; kill $SLUICE 2>/dev/null || true' EXIT
# The probe backend's line of `sluice status` (the output goes to a file:
# a reader that stops early would break the client's pipe).
probe_state() {
    "$BIN" status --control-socket "$SOCK" >"$DIR/status" 2>/dev/null || true
    awk '$1 == "backend" && $2 == "127.0.0.1" {print $5; exit}' "$DIR/status"
}
until [ "$(probe_state)" = healthy ]; do
    kill -0 $SLUICE || { cat "$DIR/stderr"; exit 1; }
    sleep 0.1
done
echo "start to probe healthy: $(( $(ms) - t0 )) ms ($SERVICES x $BACKENDS backends, M = $TABLE)"

t=$(ms); "$BIN" status --control-socket "$SOCK" >"$DIR/status"; lines=$(wc -l <"$DIR/status")
echo "status: $(( $(ms) - t )) ms ($lines lines)"
t=$(ms); "$BIN" reload --control-socket "$SOCK" >/dev/null
echo "reload: $(( $(ms) - t )) ms"

t=$(ms); kill $LISTENER; wait $LISTENER 2>/dev/null || true
until [ "$(probe_state)" = unhealthy ]; do sleep 0.02; done
echo "health flip: port closed -> status shows unhealthy: $(( $(ms) - t )) ms (detection 2 x 200 ms included)"
build=$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^sluice_table_build_seconds /{print $2 * 1000}')
echo "health flip: control thread build + publish: ${build} ms"

t=$(ms); kill -TERM $SLUICE; wait $SLUICE || true
echo "SIGTERM -> exit: $(( $(ms) - t )) ms"
trap - EXIT
rm -rf "$DIR"
