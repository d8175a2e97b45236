#!/usr/bin/env bash
# The control-plane matrix at a provider's scale through the real binary (`net_null`
# port, `--no-huge`, one worker): a provider's scale, each row one
# configuration, each figure a wall-clock time on this machine (timing
# never fails anything; docs/performance.md records the results).
#
# Rows (ROWS selects some; default all):
#   svc10k-r1    10,000 services x 10 backends, one rule (its own VIP) each
#   svc10k-r10   10,000 services x 10 backends, ten rules on its VIP each (100,000 rules)
#   be100k       1 service x 100,000 backends (table 655,373)
#   *-hc         the same with a TCP health check on every backend
#                (interval 5 s: every probe times out, see below)
# Every configuration also has a service "probe" whose one backend is
# TCP-checked on a loopback port this script opens, then closes (the
# health flip).
#
# Printed per row, in milliseconds unless said: start to /ready (ports
# up, first snapshot published: forwarding); `sluice status` text and
# JSON (best of 3, and the worst one while a reload runs); a /metrics
# scrape (best of 3) and its size; live `explain` of one flow; a reload
# with one change (a backend's weight), while `sluice status` runs in a
# loop and then alone (the client's time, and the time sluice's reply
# gives); the health flip: probe port
# closed -> status shows it unhealthy (detection 2 x 200 ms included) and
# the control thread's build + publish of it (sluice_table_build_seconds);
# RSS after start and after RELOADS reloads (default 20); SIGTERM to exit.
#
#   cargo build --release -p controlplane --bin sluice
#   scripts/bench-control-scale.sh
#   ROWS="svc10k-r1 be100k" RELOADS=100 scripts/bench-control-scale.sh
set -euo pipefail

# The -hc rows probe up to 100,000 backend addresses (10.0.0.0/8) through
# the kernel. The whole run happens in a network namespace of its own
# where 10.0.0.0/8 is routed into a veth pair towards a neighbour that
# does not exist (one permanent entry, so 100,000 addresses make no ARP):
# the probes leave and nothing answers (they time out, as unreachable
# backends do), and none reaches the machine's own network, where a
# default route would carry them to whatever answers there.
if [ -z "${SLUICE_BENCH_NETNS:-}" ]; then
  ns=sluice-cp-scale-$$
  ip netns add "$ns"
  trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
  ip -n "$ns" link set lo up
  ip -n "$ns" link add v0 type veth peer name v1
  ip -n "$ns" link set v0 up
  ip -n "$ns" link set v1 up
  ip -n "$ns" addr add 169.254.10.1/30 dev v0
  ip -n "$ns" neigh add 169.254.10.2 lladdr 02:00:00:00:00:fe dev v0 nud permanent
  ip -n "$ns" route add 10.0.0.0/8 via 169.254.10.2 dev v0
  rc=0
  SLUICE_BENCH_NETNS=$ns ip netns exec "$ns" "$(realpath "$0")" "$@" || rc=$?
  exit "$rc"
fi
cd "$(dirname "$0")/.."

BIN=${BIN:-target/release/sluice}
ROWS=${ROWS:-"svc10k-r1 svc10k-r10 be100k svc10k-r1-hc be100k-hc"}
RELOADS=${RELOADS:-20}
METRICS_PORT=${METRICS_PORT:-19387}
PROBE_PORT=${PROBE_PORT:-19388}
DIR=$(mktemp -d /tmp/sluice-cp-scale.XXXXXX)
SOCK=$DIR/sluice.sock
LISTENER=""
SLUICE=""
cleanup() {
  [ -n "$LISTENER" ] && kill "$LISTENER" 2>/dev/null || true
  [ -n "$SLUICE" ] && kill -9 "$SLUICE" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

# gen ROW FILE WEIGHT: the row's configuration, with backend 0 of the
# first big service at WEIGHT (the reload's one change).
gen() {
  python3 - "$1" "$2" "$3" "$METRICS_PORT" "$PROBE_PORT" <<'EOF'
import sys
row, path, weight, metrics, probe = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
hc = row.endswith("-hc")
base = row[:-3] if hc else row
services, per, rules, table = {
    "svc10k-r1": (10000, 10, 1, 1021),
    "svc10k-r10": (10000, 10, 10, 1021),
    "be100k": (1, 100000, 1, 655373),
}[base]
o = [f'''[dataplane]
eal_args = ["--no-huge", "-m", "1024", "--no-pci", "--log-level=error"]
workers = 1
[[dataplane.port]]
name = "p0"
device = "net_null0,no-rx=1"
mac = "02:00:00:00:00:01"
address = "10.0.0.1/8"
[metrics]
listen = "127.0.0.1:{metrics}"
[[health_check]]
name = "probe"
type = "TCP"
port = {probe}
check_interval = "200ms"
timeout = "200ms"
healthy_threshold = 2
unhealthy_threshold = 2
[[health_check]]
name = "all"
type = "TCP"
port = 9
check_interval = "5s"
timeout = "1s"
[[backend_service]]
name = "probe"
health_check = "probe"
backend = [{{ address = "127.0.0.1", mac = "02:00:00:00:00:02" }}]
''']
for i in range(services):
    o.append(f'[[backend_service]]\nname = "s{i}"\nmaglev_table_size = {table}\n')
    if hc:
        o.append('health_check = "all"\n')
    o.append('backend = [\n')
    for j in range(per):
        k = 256 + i * per + j
        w = f', weight = {weight}' if i == 0 and j == 0 else ''
        o.append(f'{{address="10.{(k >> 16) & 255}.{(k >> 8) & 255}.{k & 255}",mac="02:00:00:00:00:01"{w}}},\n')
    o.append(']\n')
for i in range(services):
    v = 0xC6120000 + i if services > 1 else 0xCB007100 + 10  # 198.18/15, or 203.0.113.10
    vip = f"{(v >> 24) & 255}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"
    for r in range(rules):
        # Compact: 100,000 rules stay under the 16 MiB a configuration may be.
        o.append(f'[[forwarding_rule]]\nname="r{i}-{r}"\nvip="{vip}"\nprotocol="TCP"\nports="{80 + r}"\nbackend_service="s{i}"\n')
open(path, "w").write("".join(o))
EOF
}

ms() { date +%s%3N; }
rss_mib() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$1/status"; }
best_of_3() { # best_of_3 CMD...: the least of three runs' milliseconds
  local best="" t d
  for _ in 1 2 3; do
    t=$(ms); "$@" >/dev/null 2>&1 || true; d=$(( $(ms) - t ))
    if [ -z "$best" ] || [ "$d" -lt "$best" ]; then best=$d; fi
  done
  echo "$best"
}
status_text() { "$BIN" status --control-socket "$SOCK"; }
status_json() { "$BIN" status --json --control-socket "$SOCK"; }
scrape() { curl -sf -o "$DIR/metrics" "http://127.0.0.1:$METRICS_PORT/metrics"; }
explain() { "$BIN" explain --control-socket "$SOCK" tcp 198.51.100.7:40000 '->' "$1:80"; }
probe_state() {
  "$BIN" status --control-socket "$SOCK" >"$DIR/status" 2>/dev/null || true
  awk '$1 == "backend" && $2 == "127.0.0.1" {print $5; exit}' "$DIR/status"
}

for row in $ROWS; do
  gen "$row" "$DIR/a.toml" 1
  gen "$row" "$DIR/b.toml" 2
  cp "$DIR/a.toml" "$DIR/sluice.toml"
  vip=$(awk -F'"' '/^vip ?=/ {print $2; exit}' "$DIR/sluice.toml")
  python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $PROBE_PORT)); s.listen(64); s.settimeout(0.1)
while True:
    try: c, _ = s.accept(); c.close()
    except socket.timeout: pass
" &
  LISTENER=$!
  t0=$(ms)
  "$BIN" run --config "$DIR/sluice.toml" --control-socket "$SOCK" 2>"$DIR/stderr" &
  SLUICE=$!
  until curl -sf -o /dev/null "http://127.0.0.1:$METRICS_PORT/ready"; do
    kill -0 $SLUICE || { cat "$DIR/stderr"; exit 1; }
    sleep 0.02
  done
  start=$(( $(ms) - t0 ))
  first=$( t=$(ms); status_text >/dev/null; echo $(( $(ms) - t )) )
  until [ "$(probe_state)" = healthy ]; do sleep 0.05; done
  rss0=$(rss_mib $SLUICE)
  st=$(best_of_3 status_text)
  sj=$(best_of_3 status_json)
  sc=$(best_of_3 scrape); size=$(wc -c <"$DIR/metrics")
  ex=$(best_of_3 explain "$vip")
  # A reload with one change, and status while it runs.
  cp "$DIR/b.toml" "$DIR/sluice.toml"
  t=$(ms); "$BIN" reload --control-socket "$SOCK" >"$DIR/reload" & RL=$!
  during=0
  while kill -0 $RL 2>/dev/null; do
    s=$(ms); status_text >/dev/null; d=$(( $(ms) - s ))
    [ "$d" -gt "$during" ] && during=$d
  done
  wait $RL; reload=$(( $(ms) - t ))
  # The same change back, with nothing else running: the client's time
  # and the time the reply says the reload took.
  cp "$DIR/a.toml" "$DIR/sluice.toml"
  t=$(ms); "$BIN" reload --control-socket "$SOCK" >"$DIR/reload"; alone=$(( $(ms) - t ))
  inside=$(grep -o ', [0-9]* ms,' "$DIR/reload" | tr -dc 0-9)
  # More reloads, alternating the two files, for memory.
  for i in $(seq 3 "$RELOADS"); do
    if (( i % 2 )); then cp "$DIR/b.toml" "$DIR/sluice.toml"; else cp "$DIR/a.toml" "$DIR/sluice.toml"; fi
    "$BIN" reload --control-socket "$SOCK" >/dev/null
  done
  rss1=$(rss_mib $SLUICE)
  # The health flip.
  t=$(ms); kill $LISTENER; wait $LISTENER 2>/dev/null || true; LISTENER=""
  until [ "$(probe_state)" = unhealthy ]; do sleep 0.02; done
  flip=$(( $(ms) - t ))
  build=$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^sluice_table_build_seconds /{printf "%.1f", $2 * 1000}')
  t=$(ms); kill -TERM $SLUICE; wait $SLUICE || true; SLUICE=""
  term=$(( $(ms) - t ))
  echo "$row: start->ready ${start} ms; first status ${first} ms; status ${st} ms (during a reload <= ${during} ms); status --json ${sj} ms; scrape ${sc} ms ($size bytes); explain ${ex} ms; reload with one change ${reload} ms while status runs, ${alone} ms alone (${inside} ms in sluice); health flip seen ${flip} ms (build+publish ${build} ms); RSS ${rss0} -> ${rss1} MiB after $RELOADS reloads; SIGTERM ${term} ms"
done
