# Sourced by scripts/bench-throughput.sh and scripts/bench-instructions.sh:
# the traffic, the devices and the sluice configuration the two harnesses
# share, so that their figures are of the same setup.
#
# bench_traffic: from TRAFFIC (tcp; tcp-one-client: established TCP from
#   one client address, up to 60,000 flows; syn, udp, drop; or quic,
#   quic-four-pass and quic-single-pass: UDP to :443 routed by QUIC-LB
#   connection IDs; see
#   bench-throughput.sh) sets GEN_FLAG (pktgen's flag), RULE_PROTO,
#   RULE_PORT, DST (the VIP, or for drop an address nothing owns) and
#   COUNTED (the metric the packets are counted by: transmitted on the
#   backends port, or for drop received on the clients port).
# bench_flows WORK: builds the release binaries (into CARGO_TARGET_DIR,
#   default target; only pktgen when
#   SLUICE_BIN names the sluice to measure: an A/B of prebuilt binaries
#   does not rebuild the tree's own), writes FLOWS 64-byte
#   flows to DST into WORK/flows.pcap, and sets RX_DEV (net_pcap replaying
#   it for ever), TX_DEV (the sink: net_null, or on the ring harness
#   net_ring1), MBUFS and MEM (MB of EAL memory).
#   WORKERS=2: the flows split by the worker owning each (flows-0.pcap,
#   flows-1.pcap; pktgen --queues=2), one RX queue each on the same
#   net_pcap port, so sluice steers nothing between its two workers.
#   FEED_PCAPS: the pcap file of each RX queue, in queue order (what the
#   ring harness's feeder replays).
# HARNESS: how the packets reach the measured worker.
#   pcap (default): RX_DEV is net_pcap with infinite_rx=1, whose RX copies
#     every frame into a fresh mbuf on the worker's core (~191
#     instructions per packet of driver cost, bench-instructions.sh).
#   ring: RX_DEV is net_ring0 (no arguments: the primary creates 16 rings
#     ETH_RXTX<q>_net_ring0 of 1024 entries, each the RX and the TX ring
#     of queue q), filled by the feeder (benches/ring-feeder/ring_feeder.c,
#     bench_feeder_start), a DPDK secondary process on another core that
#     copies the same pcap frames into mbufs: the worker's RX is a ring
#     dequeue, no copy on its core. TX_DEV is net_ring1, whose TX queues
#     the feeder takes over (its --sink; net_ring0's too, which nothing
#     should transmit on): the worker's TX is a ring enqueue, and the
#     feeder recycles what it transmitted into the RX rings, taking from
#     the pool only what that lacks (a drop's mbufs, which the program
#     frees itself). The worker's mbufs then go round without the pool,
#     as with a NIC's fast-free TX completion. Secondary processes map the primary's memory: every
#     run is on hugepages (bench_hugepages) with a --file-prefix the feeder
#     is given (FILE_PREFIX for sluice's configuration).
# bench_config FILE: writes the configuration: WORKERS workers (default
#   1), the clients
#   port on RX_DEV, the backends port on TX_DEV, ENCAP to three backends,
#   a rule for RULE_PROTO/RULE_PORT. Reads MBUFS, MEM, BURST, ENCAP;
#   NOHUGE (--no-huge or empty), CT_CAPACITY and METRICS_LISTEN may be
#   empty (the defaults, no [metrics] section); FILE_PREFIX, when set,
#   becomes the EAL's --file-prefix (the ring harness's feeder attaches to
#   it; unset, sluice picks its own).
#   A large rule table (both default to the single rule above,
#   the configuration unchanged): EXTRA_VIPS=N more VIPs, every one with
#   RULES_PER_VIP=K rules (RULE_PROTO, ports 8000 … 8000+K-1, all to
#   "web"), and the measured VIP K-1 rules of its own (RULE_PROTO, ports
#   8001 … 8000+K-1) listed before its measured one, so that its rule is
#   the last of K it is scanned among. Half the extra VIPs (rounded up)
#   from 100.64.0.1 up, the rest from 203.0.114.1 up: the measured VIP
#   203.0.113.10 sits in the middle of the sorted VIPs.
# bench_hugepages: reserves (MEM / 2 + 128) 2 MB hugepages if fewer are
#   reserved, and mounts hugetlbfs on /dev/hugepages if it is not.
# bench_feeder / bench_feeder_start PREFIX POOL LOG / bench_feeder_stop /
#   bench_dpdk_clean PREFIX: the ring harness's feeder (see HARNESS and
#   the functions' comments).

bench_traffic() {
  case "$TRAFFIC" in
    tcp) GEN_FLAG=""; RULE_PROTO=TCP; RULE_PORT=80 ;;
    tcp-one-client) GEN_FLAG="--one-client"; RULE_PROTO=TCP; RULE_PORT=80 ;;
    syn) GEN_FLAG="--syn"; RULE_PROTO=TCP; RULE_PORT=80 ;;
    udp|drop) GEN_FLAG="--udp"; RULE_PROTO=UDP; RULE_PORT=53 ;;
    quic|quic-four-pass|quic-single-pass)
      QUIC_CONFIG=${TRAFFIC#quic-}
      [ "$QUIC_CONFIG" = quic ] && QUIC_CONFIG=plain
      GEN_FLAG="--quic=$QUIC_CONFIG"; RULE_PROTO=UDP; RULE_PORT=443 ;;
    *) echo "TRAFFIC must be tcp, tcp-one-client, syn, udp, drop, quic, quic-four-pass or quic-single-pass" >&2; exit 2 ;;
  esac
  DST=203.0.113.10
  COUNTED='sluice_port_tx_packets_total{port="backends"}'
  if [ "$TRAFFIC" = drop ]; then
    DST=203.0.113.99
    COUNTED='sluice_port_rx_packets_total{port="clients"}'
  fi
}

bench_flows() {
  local work=$1
  if [ -n "${SLUICE_BIN:-}" ]; then
    cargo build --release --locked -q -p sluice-benches --bin pktgen
  else
    cargo build --release --locked -q -p controlplane -p sluice-benches --bins
  fi
  local pktgen=${CARGO_TARGET_DIR:-target}/release/pktgen
  $pktgen "$FLOWS" "$work/flows.pcap" "$DST" 02:00:00:00:00:01 $GEN_FLAG 2>/dev/null
  RX_DEV="net_pcap0,rx_pcap=$work/flows.pcap,infinite_rx=1"
  if [ "${WORKERS:-1}" = 2 ]; then
    # One RX queue per worker, each with the flows that worker owns (by
    # 5-tuple): nothing is steered. On net_pcap sluice owns them by the
    # backends port's (net_null's) modelled RSS; the ring harness's ports
    # (net_ring) hash nothing, so there by software steering's hash.
    local owners=""
    [ "${HARNESS:-pcap}" = ring ] && owners="--owners=software"
    $pktgen "$FLOWS" "$work/flows.pcap" "$DST" 02:00:00:00:00:01 $GEN_FLAG \
      --queues=2 $owners 2>/dev/null
    RX_DEV="net_pcap0,rx_pcap=$work/flows-0.pcap,rx_pcap=$work/flows-1.pcap,infinite_rx=1"
  fi
  FEED_PCAPS="$work/flows.pcap"
  [ "${WORKERS:-1}" = 2 ] && FEED_PCAPS="$work/flows-0.pcap $work/flows-1.pcap"
  case "${HARNESS:-pcap}" in
    pcap) ;;
    ring) RX_DEV="net_ring0" ;;
    *) echo "HARNESS must be pcap or ring" >&2; exit 2 ;;
  esac
  TX_DEV="net_null0,no-rx=1"
  [ "${HARNESS:-pcap}" = ring ] && TX_DEV="net_ring1"
  # The same pool for both harnesses (net_pcap preloads the capture into
  # it; the ring harness cycles its mbufs through the feeder), so that a
  # program's pool is the same size on either.
  MBUFS=$(( (FLOWS + 65536) | 1 ))
  MEM=$(( MBUFS * 3 / 1000 + 512 ))   # MB: ~2.3 KB per mbuf plus EAL overhead
}

bench_config() {
  local huge="" conntrack="" metrics=""
  [ -n "${NOHUGE:-}" ] && huge='"--no-huge", '
  [ -n "${FILE_PREFIX:-}" ] && huge="$huge\"--file-prefix=$FILE_PREFIX\", "
  [ -n "${CT_CAPACITY:-}" ] && conntrack="conntrack_capacity = $CT_CAPACITY"
  [ -n "${METRICS_LISTEN:-}" ] && metrics=$(printf '[metrics]\nlisten = "%s"' "$METRICS_LISTEN")
  cat > "$1" <<TOML
[dataplane]
eal_args = [$huge"-m", "$MEM", "--no-pci", "--log-level=error"]
workers = ${WORKERS:-1}
mbufs = $MBUFS
burst_size = $BURST
$conntrack

[[dataplane.port]]
name = "clients"
device = "$RX_DEV"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"

[[dataplane.port]]
name = "backends"
device = "$TX_DEV"
mac = "02:00:00:00:00:02"
address = "198.18.0.1/24"

$metrics

[[backend_service]]
name = "web"
encapsulation = "$ENCAP"
$([ "$ENCAP" = vxlan ] && echo 'vxlan_mac = "02:5c:00:00:00:2a"')
backend = [
  { address = "198.18.0.10", mac = "02:00:00:00:00:10"$(bench_quic_id 0) },
  { address = "198.18.0.11", mac = "02:00:00:00:00:11"$(bench_quic_id 1) },
  { address = "198.18.0.12", mac = "02:00:00:00:00:12"$(bench_quic_id 2) },
]
$(bench_quic_lb)
TOML
  bench_rules "$1"
}

# TRAFFIC=quic*: backend B's QUIC-LB server ID (sluice_benches::bench_quic_server_id).
bench_quic_id() {
  [ -n "${QUIC_CONFIG:-}" ] && printf ', quic_server_id = "0a0b%02x"' "$1"
}

# TRAFFIC=quic*: the service's QUIC-LB configuration, as
# sluice_benches::QUIC_BENCH_CONFIGS has it (key: BENCH_QUIC_KEY in hex).
bench_quic_lb() {
  [ -z "${QUIC_CONFIG:-}" ] && return
  local nonce=6 key=""
  [ "$QUIC_CONFIG" = single-pass ] && nonce=13
  [ "$QUIC_CONFIG" != plain ] && key='key = "736c756963652d62656e63682d6b6579"'
  printf '[[backend_service.quic_lb]]\nconfig_id = 0\nserver_id_length = 3\nnonce_length = %s\n%s\n' "$nonce" "$key"
}

# The forwarding rules of bench_config, appended to FILE: the measured
# rule, and EXTRA_VIPS × RULES_PER_VIP more (see bench_config).
bench_rules() {
  local extra=${EXTRA_VIPS:-0} per=${RULES_PER_VIP:-1}
  awk -v n="$extra" -v k="$per" -v proto="$RULE_PROTO" -v port="$RULE_PORT" '
    function rule(name, vip, ports) {
      printf "\n[[forwarding_rule]]\nname = \"%s\"\nvip = \"%s\"\nprotocol = \"%s\"\nports = \"%s\"\nbackend_service = \"web\"\n", name, vip, proto, ports
    }
    function ip(a) {
      return sprintf("%d.%d.%d.%d", int(a / 16777216) % 256, int(a / 65536) % 256, int(a / 256) % 256, a % 256)
    }
    BEGIN {
      for (j = 1; j < k; j++) rule("web-vip-" j, "203.0.113.10", 8000 + j)
      rule("web-vip", "203.0.113.10", port)
      low = n - int(n / 2)
      for (i = 0; i < n; i++) {
        # 100.64.0.1 …, then 203.0.114.1 …
        a = (i < low) ? 1681915905 + i : 3405804033 + (i - low)
        for (j = 0; j < k; j++) rule("x" i "-" j, ip(a), 8000 + j)
      }
    }' >> "$1"
}

# The C peer (benches/c-peer/lb_peer.c) built into target/release/lb_peer
# when missing or older than its source; prints its path.
bench_peer() {
  local peer=target/release/lb_peer
  if [ ! -x $peer ] || [ benches/c-peer/lb_peer.c -nt $peer ]; then
    # shellcheck disable=SC2046
    cc -O3 -Wall $(pkg-config --cflags libdpdk) benches/c-peer/lb_peer.c -o $peer \
      $(pkg-config --libs libdpdk) >&2
  fi
  echo $peer
}

bench_hugepages() {
  local pages=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
  local need=$(( MEM / 2 + 128 ))
  [ "$(cat $pages)" -ge "$need" ] || echo "$need" > $pages
  mkdir -p /dev/hugepages
  mountpoint -q /dev/hugepages || mount -t hugetlbfs nodev /dev/hugepages
  echo "hugepages: $(cat $pages) x 2 MB reserved"
}

# The ring harness's feeder (benches/ring-feeder/ring_feeder.c) built into
# CARGO_TARGET_DIR (default target)/release/ring_feeder when missing or
# older than its source; prints its path.
bench_feeder() {
  local feeder=${CARGO_TARGET_DIR:-target}/release/ring_feeder
  if [ ! -x "$feeder" ] || [ benches/ring-feeder/ring_feeder.c -nt "$feeder" ]; then
    mkdir -p "$(dirname "$feeder")"
    # shellcheck disable=SC2046
    cc -O3 -Wall -Wextra $(pkg-config --cflags libdpdk) benches/ring-feeder/ring_feeder.c \
      -o "$feeder" $(pkg-config --libs libdpdk) >&2
  fi
  echo "$feeder"
}

# bench_feeder_start PREFIX POOL LOG: starts the feeder as a secondary
# process of the primary running with --file-prefix=PREFIX (started just
# before: this waits up to FEEDER_WAIT seconds, default 60, for its
# multi-process socket, then the feeder waits as long for the rings and
# the port's start), feeding the RX rings of RX_DEV's queues from
# FEED_PCAPS with the mbufs the primary transmitted on net_ring0 and
# net_ring1 (whose TX queues it takes over), and mbufs of the pool named
# POOL for what those lack; its output (the offsets of net_ring's burst
# functions, then one "feeder-pps: N low: L nomem: M gap-us: G recycled:
# R" line a second) goes to LOG.
# Lcore 7,
# which no primary here uses (the feeder takes mbufs through lcore 7's
# mempool cache), on CPU FEEDER_CPU (default 0: the CPU of the primary's
# main lcore, mostly idle, the worker being on CPU 1). When the rings are
# full it spins; FEEDER_SLOW=1 (a primary under valgrind, which drains a
# ring in milliseconds): it sleeps 100 us instead, under SCHED_FIFO
# (chrt -f 1), so that other load on its CPU does not let the ring run
# dry between its time slices. Sets FEEDER_PID.
bench_feeder_start() {
  local prefix=$1 pool=$2 log=$3 wait=${FEEDER_WAIT:-60} i
  local feeder slow=()
  feeder=$(bench_feeder)
  [ "${FEEDER_SLOW:-0}" = 1 ] && slow=(chrt -f 1)
  for ((i = 0; i < wait * 10; i++)); do
    [ -S "/var/run/dpdk/$prefix/mp_socket" ] && break
    sleep 0.1
  done
  # A primary under valgrind may answer the secondary's request for its
  # devices too late (EAL: "Fail to recv reply ... bus_vdev_mp"): the
  # feeder then finds no port and exits, and is started again.
  : > "$log"
  local attempt
  for attempt in 1 2 3; do
    # shellcheck disable=SC2086
    "${slow[@]}" "$feeder" --proc-type=secondary --file-prefix="$prefix" --lcores="7@${FEEDER_CPU:-0}" \
      --no-pci --log-level=error -- --pool "$pool" --burst "${BURST:-32}" --wait "$wait" \
      --idle-sleep "$([ "${FEEDER_SLOW:-0}" = 1 ] && echo 100 || echo 0)" \
      --sink net_ring0 --sink net_ring1 \
      $FEED_PCAPS >> "$log" 2>&1 &
    FEEDER_PID=$!
    for ((i = 0; i < wait * 10; i++)); do
      grep -q '^ring_feeder: attached' "$log" && return 0
      kill -0 "$FEEDER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$FEEDER_PID" 2>/dev/null && return 0
    wait "$FEEDER_PID" 2>/dev/null || true
    echo "bench_feeder_start: the feeder exited before it attached (attempt $attempt)" >> "$log"
    sleep 1
  done
}

# Stops the feeder bench_feeder_start started (SIGINT: it detaches and
# exits), if it runs. Idempotent: an EXIT trap calls it too, so no feeder
# outlives its run.
bench_feeder_stop() {
  if [ -n "${FEEDER_PID:-}" ]; then
    kill -INT "$FEEDER_PID" 2>/dev/null || true
    wait "$FEEDER_PID" 2>/dev/null || true
    FEEDER_PID=""
  fi
}

# The median of the feeder's per-second rates in LOG after the first
# SKIP, in packets per second (0 when none).
bench_feeder_pps() {
  awk '/^feeder-pps:/ {print $2}' "$1" | tail -n +$(( $2 + 1 )) | sort -n \
    | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print 0}'
}

# Removes what a primary with --file-prefix=PREFIX leaves behind: its
# runtime directory and its hugepage files (a pool that still had mbufs in
# the rings at exit is not freed, nor its pages).
bench_dpdk_clean() {
  rm -rf "/var/run/dpdk/$1"
  rm -f /dev/hugepages/"$1"map_*
}
