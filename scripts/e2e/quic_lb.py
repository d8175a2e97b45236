#!/usr/bin/env python3
"""The live QUIC-LB test: a real QUIC stack (quinn, `quic-peer`) through the
real sluice binary on DPDK (net_af_packet), layer-2 DSR. Run as root:

    scripts/e2e/quic_lb.py [--sluice target/debug/sluice] [--peer target/debug/quic-peer]

    client ns (10.97.0.100 and .101) ─┐
    sluice ns: lb0 (DPDK), TAP slq-up 10.97.0.2 ─┤ bridge (switch ns)
    backend ns b1..b3 (10.97.0.11..13, VIP 10.97.1.10 on lo) ─┘

Each backend runs `quic-peer server` on VIP:4433 issuing QUIC-LB connection
IDs with its own server ID. The client opens K connections, each looping
requests; a third of the way through every connection's endpoint rebinds
to a new source port, at two thirds to its second source address, and the
requests go on.

  run A  the service has QUIC-LB: every connection survives both moves and
         is served by one server; sluice_quic_lb_routed_packets_total > 0
  run B  the same servers, the service without QUIC-LB (Maglev on the
         5-tuple): connections whose new address or port hashes to
         another backend die. The count is reported; none dying means the
         moves were not tested, and fails the run.
  run C  config rotation under traffic: sluice reloaded to add config 1,
         the servers switch from config 0 to config 1 (their IDs retired
         every second, so connections move to new ones), sluice reloaded
         to remove config 0: no connection lost (--runs AB skips it)

Exits non-zero when run A or C loses a connection, or run B loses none.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, failures  # noqa: E402
import lab  # noqa: E402
import netns  # noqa: E402

PREFIX = "slq"
SUBNET = "10.97.0"
APPLIANCE = f"{SUBNET}.2"
CLIENTS = (f"{SUBNET}.100", f"{SUBNET}.101")
VIP = "10.97.1.10"
PORT = 4433
METRICS = "127.0.0.1:9164"
BACKENDS = (1, 2, 3)
SERVER_ID_LENGTH = 3
NONCE_LENGTH = 6
# Test keys (the draft's example key, and another), not secrets.
KEYS = {0: "8f95f09245765f80256934e50c66207f", 1: "fdf726a9893ec05c0632d3956680baf0"}

report = []



def server_id(i):
    return f"0a0b{i:02x}"


class QuicLab(lab.Lab):
    """The lab's namespaces and sluice handling, with its own names,
    addresses and metrics port, three backends and a two-address client."""

    def __init__(self, sluice, peer, workers=1):
        super().__init__(workers=workers, backends=len(BACKENDS), sluice=sluice)
        self.tag = f"{PREFIX}{os.getpid()}"
        self.peer = peer

    def build(self):
        netns.remove_stale(PREFIX)
        for role in ["sw", "lb", "c"] + [f"b{i}" for i in BACKENDS]:
            lab.sh("ip", "netns", "add", self.ns(role))
            self.namespaces.append(self.ns(role))
            self.run_in(role, "ip", "link", "set", "lo", "up")
        self.run_in("sw", "ip", "link", "add", "br0", "type", "bridge")
        self.run_in("sw", "ip", "link", "set", "br0", "up")
        self._plug("lb", "lb0")
        self._plug("c", "eth0")
        for i in BACKENDS:
            self._plug(f"b{i}", "eth0")
        self.run_in("lb", "ip", "link", "set", "lb0", "arp", "off")
        self._sysctl("lb", "net.ipv6.conf.lb0.disable_ipv6=1",
                     "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.lb0.rp_filter=1")
        for addr in CLIENTS:
            self.run_in("c", "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
        self.run_in("c", "ip", "route", "add", f"{VIP}/32", "via", APPLIANCE)
        for i in BACKENDS:
            b = f"b{i}"
            self.run_in(b, "ip", "addr", "add", f"{self.backend_ip(i)}/24", "dev", "eth0")
            self.run_in(b, "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
            self._sysctl(b, "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
                         "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.eth0.rp_filter=0",
                         "net.ipv4.conf.lo.rp_filter=0")

    @staticmethod
    def backend_ip(i):
        return f"{SUBNET}.{10 + i}"

    # ---- QUIC servers -------------------------------------------------------

    def start_servers(self, args_of):
        """One `quic-peer server` per backend; `args_of(i)` gives its
        connection ID options."""
        self.stop_servers()
        for i in BACKENDS:
            name = f"b{i}"
            log = open(os.path.join(self.dir, f"{name}.log"), "a")
            self.procs[name] = subprocess.Popen(
                ["ip", "netns", "exec", self.ns(name), self.peer, "server",
                 "--listen", f"{VIP}:{PORT}", "--name", name, *args_of(i)],
                stdout=log, stderr=log)
        for i in BACKENDS:
            for _ in range(100):
                if f":{PORT}" in self.run_in(f"b{i}", "ss", "-lun", f"sport = :{PORT}"):
                    break
                if self.procs[f"b{i}"].poll() is not None:
                    raise RuntimeError(f"quic-peer on b{i} exited: {self.backend_log(i)}")
                time.sleep(0.05)
            else:
                raise RuntimeError(f"quic-peer on b{i} did not start listening")

    def stop_servers(self):
        for i in BACKENDS:
            self.stop_backend(i)

    def backend_log(self, i):
        with open(os.path.join(self.dir, f"b{i}.log")) as f:
            return f.read()[-2000:]

    def client_run(self, connections, duration, background=False):
        cmd = ["ip", "netns", "exec", self.ns("c"), self.peer, "client",
               "--connect", f"{VIP}:{PORT}", "--bind", CLIENTS[0], "--rebind-to", CLIENTS[1],
               "--connections", str(connections), "--duration", str(duration)]
        p = subprocess.Popen(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return p if background else self.client_result(p)

    def client_result(self, p):
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"quic-peer client exited {p.returncode}: {err.strip()}")
        # Kept with the logs (SLUICE_E2E_KEEP=1 keeps the directory).
        with open(os.path.join(self.dir, f"client-{time.monotonic_ns()}.json"), "w") as f:
            f.write(out)
        return json.loads(out)

    # ---- sluice ---------------------------------------------------------------

    def write_quic_config(self, configs):
        """The service with QUIC-LB configurations `configs` (config ids;
        none: the service balances QUIC as any UDP)."""
        if configs:
            bl = ",\n  ".join(f'{{ address = "{self.backend_ip(i)}", '
                              f'quic_server_id = "{server_id(i)}" }}' for i in BACKENDS)
        else:
            bl = ",\n  ".join(f'{{ address = "{self.backend_ip(i)}" }}' for i in BACKENDS)
        tables = "".join(f"""
[[backend_service.quic_lb]]
config_id = {c}
server_id_length = {SERVER_ID_LENGTH}
nonce_length = {NONCE_LENGTH}
key = "{KEYS[c]}"
""" for c in configs)
        qpairs = f",qpairs={self.workers}" if self.workers > 1 else ""
        text = f"""# Written by scripts/e2e/quic_lb.py
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--log-level=error"]
workers = {self.workers}

[[dataplane.port]]
name = "uplink"
device = "net_af_packet0,iface=lb0{qpairs}"
address = "{APPLIANCE}/24"
tap = "slq-up"

[metrics]
listen = "{METRICS}"

[[backend_service]]
name = "quic"
encapsulation = "l2"
backend = [
  {bl},
]
{tables}
[[forwarding_rule]]
name = "quic"
vip = "{VIP}"
protocol = "UDP"
ports = "{PORT}"
backend_service = "quic"
"""
        with open(self.config, "w") as f:
            f.write(text)
        r = lab.sh(self.sluice_bin, "check-config", self.config, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"sluice check-config refuses the configuration:\n"
                               f"{r.stdout}{r.stderr}")

    def reload_checked(self):
        r = self.reload()
        if r.returncode != 0:
            raise RuntimeError(f"sluice reload: {r.stdout.strip()} {r.stderr.strip()}")

    def metrics(self, quiet=False):
        r = self.run_in("lb", sys.executable, "-c",
                        "import urllib.request,sys;"
                        "sys.stdout.write(urllib.request.urlopen("
                        f"'http://{METRICS}/metrics', timeout=2).read().decode())",
                        check=not quiet)
        out = {}
        for line in (r if isinstance(r, str) else "").splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out

    def quic_counters(self):
        m = self.metrics()
        routed = m.get("sluice_quic_lb_routed_packets_total")
        fallback = {k.split('"')[1]: int(v) for k, v in m.items()
                    if k.startswith("sluice_quic_lb_fallback_packets_total{") and v}
        return routed, fallback

    def wait_next_hops(self):
        """Until every backend's MAC is resolved (the kernel's ARP through
        the TAP), so the first packets are not dropped unresolved."""
        for i in BACKENDS:
            self.run_in("lb", "ping", "-c", "1", "-W", "1", self.backend_ip(i), check=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = self.metrics(quiet=True)
            hops = [v for k, v in m.items() if k.startswith("sluice_backend_next_hop_resolved")]
            if len(hops) >= len(BACKENDS) and all(v == 1 for v in hops):
                return
            time.sleep(0.1)
        raise RuntimeError("backends' next hops not resolved")


def summary(r):
    return (f"{r['survived']}/{r['connections']} connections survived "
            f"(lost at the first address {r['lost_first']}, after the port change "
            f"{r['lost_new_port']}, after the address change {r['lost_new_address']}); "
            f"{r['requests']} requests; connections per server {r['connections_per_server']}")


def failed_details(r, n=3):
    return [d for d in r["details"] if not d["survived"]][:n]


def quic_lb_args(config_id=0, rotate_to=None, switch_file=None, lifetime_ms=0):
    def args(i):
        a = ["--config-id", str(config_id), "--server-id-length", str(SERVER_ID_LENGTH),
             "--nonce-length", str(NONCE_LENGTH), "--server-id", server_id(i),
             "--key", KEYS[config_id]]
        if rotate_to is not None:
            a += ["--next-config-id", str(rotate_to), "--next-key", KEYS[rotate_to],
                  "--switch-file", switch_file]
        if lifetime_ms:
            a += ["--cid-lifetime-ms", str(lifetime_ms)]
        return a
    return args


def run_a(qlab, connections, duration):
    print(f"run A: QUIC-LB configured; {connections} connections move port, then address")
    qlab.write_quic_config([0])
    qlab.start_sluice()
    qlab.wait_next_hops()
    r = qlab.client_run(connections, duration)
    routed, fallback = qlab.quic_counters()
    report.append(f"run A (QUIC-LB): {summary(r)}")
    report.append(f"run A: routed by connection ID {routed}, ordinary path {fallback}")
    check(r["lost"] == 0, f"run A: every connection survived both moves: {summary(r)}"
          + (f" e.g. {failed_details(r)}" if r["lost"] else ""))
    check(r["more_than_one_server"] == 0, "run A: each connection saw one server")
    check(len(r["connections_per_server"]) == len(BACKENDS),
          f"run A: connections on every backend: {r['connections_per_server']}")
    check(routed is not None and routed > 0,
          f"run A: sluice_quic_lb_routed_packets_total > 0 ({routed})")
    # The handshake's Initial packets carry the client's own ID; nothing
    # else may miss: the servers' IDs all decode to a backend.
    bad = {k: v for k, v in fallback.items() if k != "initial"}
    check(not bad, f"run A: no fallback but initial: {fallback}")
    check(qlab.stop_sluice() == 0, "run A: sluice stopped cleanly")
    return r


def run_b(qlab, connections, duration):
    print(f"run B: the same servers, the service without QUIC-LB; {connections} connections")
    qlab.write_quic_config([])
    qlab.start_sluice()
    qlab.wait_next_hops()
    r = qlab.client_run(connections, duration)
    report.append(f"run B (no QUIC-LB): {summary(r)}")
    check(r["lost_first"] == 0,
          f"run B: no connection lost before the moves ({r['lost_first']})")
    check(r["lost"] > 0, f"run B: the moves cost connections without QUIC-LB "
          f"({r['lost']} of {r['connections']} lost)")
    check(qlab.stop_sluice() == 0, "run B: sluice stopped cleanly")
    return r


def run_c(qlab, connections, duration):
    print(f"run C: config rotation 0 -> 1 under traffic; {connections} connections")
    switch = os.path.join(qlab.dir, "switch-to-config-1")
    qlab.start_servers(quic_lb_args(0, rotate_to=1, switch_file=switch, lifetime_ms=1000))
    qlab.write_quic_config([0])
    qlab.start_sluice()
    qlab.wait_next_hops()
    client = qlab.client_run(connections, duration, background=True)
    # Connections up and issued config-0 IDs; then sluice learns config 1
    # before any server issues it.
    time.sleep(duration * 0.15)
    qlab.write_quic_config([0, 1])
    qlab.reload_checked()
    time.sleep(duration * 0.1)
    open(switch, "w").close()
    # IDs live a second: by then every connection uses config-1 IDs.
    time.sleep(duration * 0.3)
    qlab.write_quic_config([1])
    qlab.reload_checked()
    routed_before, _ = qlab.quic_counters()
    r = qlab.client_result(client)
    routed, fallback = qlab.quic_counters()
    # With config 0 gone, only config-1 IDs can still be routed.
    check(routed is not None and routed_before is not None and routed > routed_before,
          f"run C: packets routed after config 0 was removed ({routed_before} -> {routed})")
    report.append(f"run C (rotation): {summary(r)}")
    report.append(f"run C: routed {routed}, ordinary path {fallback}")
    check(r["lost"] == 0, f"run C: every connection survived the rotation and both moves: "
          f"{summary(r)}" + (f" e.g. {failed_details(r)}" if r["lost"] else ""))
    check(r["more_than_one_server"] == 0, "run C: each connection saw one server")
    check(fallback.get("unknown_config", 0) == 0,
          f"run C: no packet with a config sluice did not have: {fallback}")
    check(qlab.stop_sluice() == 0, "run C: sluice stopped cleanly")


def main():
    root = lab.ROOT
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(root, "target", "debug", "sluice"))
    ap.add_argument("--peer", default=os.path.join(root, "target", "debug", "quic-peer"))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--connections", type=int, default=24)
    ap.add_argument("--duration", type=float, default=9.0, help="seconds per run")
    ap.add_argument("--runs", default="ABC", help="which runs, e.g. AB (default ABC)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("quic_lb: needs root (network namespaces)")
    for path in (a.sluice, a.peer):
        if not os.access(path, os.X_OK):
            sys.exit(f"quic_lb: {path} not built (cargo build --workspace)")
    qlab = QuicLab(os.path.abspath(a.sluice), os.path.abspath(a.peer), a.workers)
    started = time.monotonic()
    results = {}
    try:
        qlab.build()
        qlab.start_servers(quic_lb_args(0))
        if "A" in a.runs:
            results["A"] = run_a(qlab, a.connections, a.duration)
        if "B" in a.runs:
            results["B"] = run_b(qlab, a.connections, a.duration)
        if "C" in a.runs:
            run_c(qlab, a.connections, a.duration * 1.5)
    except Exception as e:  # noqa: BLE001 — reported as a failure below
        failures.append(f"quic_lb error: {e}")
        print(f"  FAIL {e}")
    finally:
        if failures and qlab.sluice is not None:
            print("--- sluice log ---\n" + qlab.sluice_output()[-4000:])
        qlab.close()
    print(f"quic_lb ({a.workers} worker(s), {time.monotonic() - started:.0f} s):")
    for line in report:
        print(f"  {line}")
    if "A" in results and "B" in results:
        print(f"quic_lb: connections lost to the moves: with QUIC-LB "
              f"{results['A']['lost']}/{results['A']['connections']}, without "
              f"{results['B']['lost']}/{results['B']['connections']}")
    if failures:
        print(f"quic_lb: {len(failures)} failure(s)")
        for f in failures:
            print(f"  - {f}")
        sys.exit(1)
    print("quic_lb: all passed")


if __name__ == "__main__":
    main()
