#!/usr/bin/env python3
"""The live scale-out suite (AP-6): two sluice appliances behind a router
that spreads the VIPs over them by ECMP, each announcing the VIPs over BGP
through its own BIRD 2 only while it can serve them. Run as root:

    python3 scripts/e2e/scaleout.py --sluice target/debug/sluice

    client ns ── router ns (BIRD, ECMP, fib_multipath_hash_policy=1) ──┐
    10.97.2.100-164      10.97.2.1 | 10.97.0.1                         │ bridge
    appliance a1: lb0 (net_af_packet), TAP sl-up 10.97.0.2, BIRD ──────┤ (switch ns)
    appliance a2: lb0 (net_af_packet), TAP sl-up 10.97.0.3, BIRD ──────┤
    backends b1..b4 10.97.0.11-14, VIPs on lo (L2 DSR) ────────────────┘

VIP 10.97.1.10 (service web: b1..b3) and 10.97.1.20 (service alt: b4).
Each appliance's BIRD runs the configuration `sluice bird-config` renders
from its [bgp]; the router's BIRD merges the two paths into one multipath
route. Backends answer clients directly, through the router.

Cases (numbered as the run prints them):
  1  both appliances announce and both carry new connections (the split,
     from each appliance's conntrack inserts); communities and MED reach
     the router
  2  identical configuration and table digests on both
  5  one appliance's health-check path to b4 cut (a fib rule in its
     namespace): it withdraws only 10.97.1.20; the other keeps serving it
  3  kill -9 of a1 under 240 keep-alive connections: the router withdraws
     it within BFD/hold time, and >= 99 % of the connections that were on
     a1 go on through a2 without a reset, on the same backend (Maglev
     consistency, no state shared)
  6  a1 restarted: announced only once ready and serving; connections
     moving back from a2 to a1 keep their backend
  4  SIGTERM of a2 under connections and new ones: withdrawn before it
     stops (drain_time), zero failed connections
Reported: withdrawal time, survival fraction, ECMP split, CPU use.
Namespaces are removed on exit, on a signal, and (left by a killed run)
at start.
"""

import argparse
import atexit
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import netns
from checks import check, failures, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PREFIX = "sso"
LAN = "10.97.0"
ROUTER = f"{LAN}.1"
APPLIANCES = {"a1": f"{LAN}.2", "a2": f"{LAN}.3"}
CLIENT_NET = "10.97.2"
VIP_WEB = "10.97.1.10"
VIP_ALT = "10.97.1.20"
ROUTER_ASN = 65000
FLEET_ASN = 65001
# BFD: 100 ms x 5; BGP hold time 3 s behind it.
BFD_DETECT = 0.5
HOLD_TIME = 3
DRAIN = 3.0
# HC-4 with the appliances' check: timeout 0.5 s x 2 + interval 1 s.
FAIL_WINDOW = 2.0

report = []


def sh(*cmd, check=True):
    r = subprocess.run(cmd, check=False, text=True, capture_output=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


class Fleet:
    def __init__(self, sluice, idle):
        self.tag = f"{PREFIX}{os.getpid()}"
        self.sluice_bin = sluice
        self.idle = idle
        self.dir = tempfile.mkdtemp(prefix="sluice-scaleout.")
        self.state = os.path.join(self.dir, "state")
        os.makedirs(self.state)
        self.namespaces = []
        self.procs = {}
        self.sluice = {}
        self.cpu = {}
        self.closed = False
        atexit.register(self.close)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame):
        self.close()
        sys.exit(128 + signum)

    def ns(self, role):
        return f"{self.tag}-{role}"

    def run_in(self, role, *cmd, check=True):
        return sh("ip", "netns", "exec", self.ns(role), *cmd, check=check)

    def path(self, name):
        return os.path.join(self.dir, name)

    # ---- topology ---------------------------------------------------------

    def build(self):
        netns.remove_stale(PREFIX)
        roles = ["sw", "r", "c", "a1", "a2", "b1", "b2", "b3", "b4"]
        for role in roles:
            sh("ip", "netns", "add", self.ns(role))
            self.namespaces.append(self.ns(role))
            self.run_in(role, "ip", "link", "set", "lo", "up")
        self.run_in("sw", "ip", "link", "add", "br0", "type", "bridge")
        self.run_in("sw", "ip", "link", "set", "br0", "up")
        self._plug("r", "eth0")
        for a in APPLIANCES:
            self._plug(a, "lb0")
            # The kernel keeps off the DPDK port (AP-4): no ARP, no IPv6,
            # strict reverse-path filter.
            self.run_in(a, "ip", "link", "set", "lb0", "arp", "off")
            self.run_in(a, "sysctl", "-qw", "net.ipv6.conf.lb0.disable_ipv6=1",
                        "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.lb0.rp_filter=1")
        for i in range(1, 5):
            b = f"b{i}"
            self._plug(b, "eth0")
            self.run_in(b, "ip", "addr", "add", f"{LAN}.{10 + i}/24", "dev", "eth0")
            for vip in (VIP_WEB, VIP_ALT):
                self.run_in(b, "ip", "addr", "add", f"{vip}/32", "dev", "lo")
            self.run_in(b, "ip", "route", "add", "default", "via", ROUTER)
            self.run_in(b, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1",
                        "net.ipv4.conf.all.arp_announce=2", "net.ipv4.conf.all.rp_filter=0",
                        "net.ipv4.conf.eth0.rp_filter=0", "net.ipv4.conf.lo.rp_filter=0")
        # Router: the appliance LAN on eth0, the clients on eth1, ECMP
        # hashing on the 5-tuple.
        self.run_in("r", "ip", "addr", "add", f"{ROUTER}/24", "dev", "eth0")
        sh("ip", "link", "add", "eth1", "netns", self.ns("r"), "type", "veth",
           "peer", "name", "eth0", "netns", self.ns("c"))
        for role in ("r", "c"):
            self.run_in(role, "ip", "link", "set", "eth1" if role == "r" else "eth0", "up")
            self.run_in(role, "ethtool", "-K", "eth1" if role == "r" else "eth0",
                        "tx", "off", "tso", "off", "gso", "off", check=False)
        self.run_in("r", "ip", "addr", "add", f"{CLIENT_NET}.1/24", "dev", "eth1")
        self.run_in("r", "sysctl", "-qw", "net.ipv4.ip_forward=1",
                    "net.ipv4.fib_multipath_hash_policy=1", "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.eth0.rp_filter=0", "net.ipv4.conf.eth1.rp_filter=0")
        self.run_in("c", "ip", "addr", "add", f"{CLIENT_NET}.100/24", "dev", "eth0")
        for i in range(101, 165):
            self.run_in("c", "ip", "addr", "add", f"{CLIENT_NET}.{i}/24", "dev", "eth0")
        self.run_in("c", "ip", "route", "add", "default", "via", f"{CLIENT_NET}.1")

    def _plug(self, role, ifname):
        peer = f"p-{role}"
        sh("ip", "link", "add", ifname, "netns", self.ns(role), "type", "veth",
           "peer", "name", peer, "netns", self.ns("sw"))
        self.run_in("sw", "ip", "link", "set", peer, "master", "br0", "up")
        self.run_in(role, "ip", "link", "set", ifname, "up")
        # af_packet would hand DPDK frames with unfinished checksums or
        # 64 KB segments (docs/operations.md, veth offloads).
        self.run_in(role, "ethtool", "-K", ifname, "tx", "off", "tso", "off", "gso", "off",
                    check=False)

    # ---- processes ----------------------------------------------------------

    def spawn(self, name, role, *cmd):
        log = open(self.path(f"{name}.log"), "a")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(role), *cmd],
                             stdout=log, stderr=log)
        self.procs[name] = p
        return p

    def start_backend(self, i):
        name = f"b{i}"
        self.spawn(name, name, sys.executable, os.path.join(HERE, "backend.py"),
                   "--name", name, "--vip", VIP_WEB, "--state", self.state)
        ok = wait_for(lambda: ":80" in self.run_in(name, "ss", "-ltn", "sport = :80",
                                                   check=False), 10)
        if ok is None:
            raise RuntimeError(f"backend {name} did not start listening")

    def start_router_bird(self):
        conf = self.path("bird-r.conf")
        with open(conf, "w") as f:
            f.write(f"""log "{self.path('bird-r.log')}" all;
router id {ROUTER};
protocol device {{ scan time 10; }}
# The appliances' paths merged into one multipath route in the kernel.
protocol kernel {{
  merge paths on;
  ipv4 {{ import none; export all; }};
}}
protocol bfd {{
  interface "eth0" {{ min rx interval 100 ms; min tx interval 100 ms; multiplier 5; }};
}}
template bgp appliance {{
  local {ROUTER} as {ROUTER_ASN};
  direct;
  hold time {HOLD_TIME};
  keepalive time 1;
  connect delay time 1;
  connect retry time 2;
  error wait time 1, 5;
  graceful restart off;
  bfd on;
  ipv4 {{ import all; export none; }};
}}
""")
            for a, addr in APPLIANCES.items():
                f.write(f"protocol bgp {a} from appliance {{ neighbor {addr} as {FLEET_ASN}; }}\n")
        self.spawn("bird-r", "r", "bird", "-f", "-c", conf, "-s", self.path("bird-r.ctl"),
                   "-P", self.path("bird-r.pid"))

    def start_appliance_bird(self, a):
        rendered = sh(self.sluice_bin, "bird-config", self.path(f"{a}.toml"))
        conf = self.path(f"bird-{a}.conf")
        with open(conf, "w") as f:
            f.write(f'log "{self.path(f"bird-{a}.log")}" all;\n' + rendered)
        self.spawn(f"bird-{a}", a, "bird", "-f", "-c", conf, "-s",
                   self.path(f"bird-{a}.ctl"), "-P", self.path(f"bird-{a}.pid"))

    def write_config(self, a):
        backends = ",\n  ".join(f'{{ address = "{LAN}.{10 + i}" }}' for i in (1, 2, 3))
        idle = f"idle = {self.idle}\n" if self.idle else ""
        text = f"""# Written by scripts/e2e/scaleout.py
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--log-level=error", "--lcores=0@0,1@1"]
workers = 1
{idle}
[[dataplane.port]]
name = "uplink"
device = "net_af_packet0,iface=lb0"
address = "{APPLIANCES[a]}/24"
tap = "sl-up"

[metrics]
listen = "127.0.0.1:9064"

[[health_check]]
name = "http"
type = "HTTP"
port = 80
request_path = "/health"
check_interval = "1s"
timeout = "500ms"
healthy_threshold = 2
unhealthy_threshold = 2

[[backend_service]]
name = "web"
encapsulation = "l2"
health_check = "http"
backend = [
  {backends},
]

[[backend_service]]
name = "alt"
encapsulation = "l2"
health_check = "http"
backend = [ {{ address = "{LAN}.14" }} ]

[[forwarding_rule]]
name = "web"
vip = "{VIP_WEB}"
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rule]]
name = "alt"
vip = "{VIP_ALT}"
protocol = "TCP"
ports = "80"
backend_service = "alt"

[bgp]
asn = {FLEET_ASN}
hold_time = "{HOLD_TIME}s"
bfd = true
bfd_interval = "100ms"
bfd_multiplier = 5
drain_time = "{DRAIN:.0f}s"

[[bgp.peer]]
name = "router"
address = "{ROUTER}"
asn = {ROUTER_ASN}

[[bgp.vip]]
vip = "{VIP_WEB}"
communities = ["{ROUTER_ASN}:100"]
med = 10
"""
        with open(self.path(f"{a}.toml"), "w") as f:
            f.write(text)

    def start_sluice(self, a):
        # Each appliance's own hand-off file: a restarted one takes its
        # connections back, never another's.
        p = self.spawn(f"sluice-{a}", a, self.sluice_bin, "run", "--config",
                       self.path(f"{a}.toml"), "--control-socket", self.path(f"{a}.sock"),
                       "--handoff-file", self.path(f"{a}.handoff"))
        self.sluice[a] = p
        self.cpu[a] = self.cpu.get(a, []) + [(p.pid, time.monotonic(), 0.0)]
        return p

    def wait_ready(self, a, timeout=40):
        def up():
            if self.sluice[a].poll() is not None:
                raise RuntimeError(f"sluice {a} exited {self.sluice[a].returncode}:\n"
                                   + self.log(f"sluice-{a}")[-3000:])
            return self.ready(a)
        return wait_for(up, timeout, step=0.1)

    def ready(self, a):
        r = self.run_in(a, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "1",
                        "http://127.0.0.1:9064/ready", check=False)
        return r.strip() == "200"

    def note_cpu(self, a):
        """Records the CPU time of appliance a's current process."""
        p = self.sluice.get(a)
        if p is None:
            return
        pid, started, _ = self.cpu[a][-1]
        used = cpu_seconds(pid)
        if used is not None:
            self.cpu[a][-1] = (pid, started, used, time.monotonic())

    def signal_sluice(self, a, sig):
        self.note_cpu(a)
        self.sluice[a].send_signal(sig)

    def log(self, name):
        try:
            with open(self.path(f"{name}.log")) as f:
                return f.read()
        except OSError:
            return ""

    # ---- observations ---------------------------------------------------------

    def nexthops(self, vip):
        """The appliances the router sends `vip` to."""
        out = self.run_in("r", "ip", "-j", "route", "show", f"{vip}/32", check=False)
        try:
            routes = json.loads(out or "[]")
        except ValueError:
            return set()
        hops = set()
        for r in routes:
            if "gateway" in r:
                hops.add(r["gateway"])
            for n in r.get("nexthops", []):
                hops.add(n["gateway"])
        by_addr = {v: k for k, v in APPLIANCES.items()}
        return {by_addr.get(h, h) for h in hops}

    def appliance_of(self, src, sport, vip=VIP_WEB):
        """The appliance the router's ECMP hash picks for a connection."""
        out = self.run_in("r", "ip", "-j", "route", "get", vip, "from", src, "iif", "eth1",
                          "ipproto", "tcp", "sport", str(sport), "dport", "80", check=False)
        try:
            gw = json.loads(out)[0].get("gateway")
        except (ValueError, IndexError):
            return None
        return {v: k for k, v in APPLIANCES.items()}.get(gw)

    def status(self, a):
        return sh(self.sluice_bin, "status", "--control-socket", self.path(f"{a}.sock"),
                  check=False)

    def metrics(self, a):
        text = self.run_in(a, "curl", "-s", "-m", "2", "http://127.0.0.1:9064/metrics",
                           check=False)
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out

    def birdc(self, role, *cmd):
        return sh("birdc", "-s", self.path(f"bird-{role}.ctl"), *cmd, check=False)

    def client(self, *args):
        out = self.run_in("c", sys.executable, os.path.join(HERE, "fleet_client.py"),
                          *[str(a) for a in args])
        return json.loads(out)

    def client_background(self, *args):
        path = self.path(f"client-{time.monotonic_ns()}.json")
        f = open(path, "w")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns("c"), sys.executable,
                              os.path.join(HERE, "fleet_client.py"), *[str(a) for a in args]],
                             stdout=f, stderr=subprocess.DEVNULL)
        return p, path

    @staticmethod
    def collect(bg):
        p, path = bg
        p.wait(timeout=120)
        with open(path) as f:
            return json.loads(f.read())

    # ---- teardown ---------------------------------------------------------------

    def close(self):
        if self.closed:
            return
        self.closed = True
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        if os.environ.get("SLUICE_E2E_KEEP") is None:
            subprocess.run(["rm", "-rf", self.dir], check=False)


# ---- cases -----------------------------------------------------------------------


def conntrack_inserts(fleet):
    return {a: fleet.metrics(a).get("sluice_conntrack_inserts_total", 0) for a in APPLIANCES}


def case_announce_and_split(fleet, n):
    print("case 1: both appliances announce both VIPs; new connections spread over both")
    both = set(APPLIANCES)
    t = wait_for(lambda: fleet.nexthops(VIP_WEB) == both and fleet.nexthops(VIP_ALT) == both, 30)
    check(t is not None, f"the router routes both VIPs over a1 and a2 (ECMP): "
          f"{fleet.nexthops(VIP_WEB)}, {fleet.nexthops(VIP_ALT)}")
    route = fleet.birdc("r", "show", "route", "all", f"{VIP_WEB}/32")
    check(f"({ROUTER_ASN},100)" in route and "BGP.med: 10" in route,
          f"the VIP's community and MED reach the router (BIRD: bgp_community, bgp_med)")
    before = conntrack_inserts(fleet)
    r = fleet.client("spread", n, VIP_WEB)
    after = conntrack_inserts(fleet)
    carried = {a: int(after[a] - before[a]) for a in APPLIANCES}
    total = sum(carried.values()) or 1
    split = {a: round(100 * c / total, 1) for a, c in carried.items()}
    report.append(f"ECMP split over {n} connections: {split} % (connections per appliance "
                  f"{carried}); backends {r['counts']}")
    check(r["failures"] == 0, f"{n} connections, no failure ({r['errors']})")
    check(all(25 <= s <= 75 for s in split.values()),
          f"both appliances carry new connections, 25-75 % each: {split}")
    check(set(r["counts"]) == {"b1", "b2", "b3"}, f"all three backends answer: {r['counts']}")


def digests(fleet, a):
    return sorted(line for line in fleet.status(a).splitlines()
                  if line.startswith("config digest") or " table digest " in line)


def case_digests(fleet):
    print("case 2: identical configuration and table digests (MG-2)")
    d1, d2 = digests(fleet, "a1"), digests(fleet, "a2")
    report.append("digests: " + "; ".join(d1))
    check(len(d1) == 3 and d1 == d2, f"a1 and a2 agree: {d1} == {d2}")
    m1, m2 = fleet.metrics("a1"), fleet.metrics("a2")
    info = [k for k in m1 if k.startswith("sluice_config_digest_info")]
    check(len(info) == 1 and info[0] in m2, f"/metrics sluice_config_digest_info agrees: {info}")


def case_one_vip_unhealthy(fleet):
    print("case 5: a1's health-check path to b4 cut: a1 withdraws only 10.97.1.20")
    rule = ["ip", "rule", "add", "to", f"{LAN}.14", "ipproto", "tcp", "dport", "80",
            "prohibit"]
    fleet.run_in("a1", *rule)
    t = wait_for(lambda: fleet.nexthops(VIP_ALT) == {"a2"}, FAIL_WINDOW + 6)
    report.append(f"one VIP unhealthy on a1: withdrawn from the router in "
                  f"{t if t is None else round(t, 2)} s (HC-4 window {FAIL_WINDOW} s)")
    check(t is not None, f"the router sends {VIP_ALT} to a2 only: {fleet.nexthops(VIP_ALT)}")
    check(fleet.nexthops(VIP_WEB) == set(APPLIANCES),
          f"{VIP_WEB} stays on both: {fleet.nexthops(VIP_WEB)}")
    status = fleet.status("a1")
    check(f"vip {VIP_ALT} withdrawn: no healthy backend is eligible (service alt)" in status,
          "a1's status says why")
    m = fleet.metrics("a1")
    check(m.get(f'sluice_vip_announced{{vip="{VIP_ALT}"}}') == 0
          and m.get(f'sluice_vip_announced{{vip="{VIP_WEB}"}}') == 1,
          "a1's sluice_vip_announced: 0 for the withdrawn VIP, 1 for the other")
    check(m.get(f'sluice_vip_servable{{vip="{VIP_ALT}"}}') == 0
          and m.get(f'sluice_vip_servable{{vip="{VIP_WEB}"}}') == 1,
          "a1's sluice_vip_servable: 0 for the VIP it cannot serve, 1 for the other")
    r = fleet.client("spread", 60, VIP_ALT)
    check(r["failures"] == 0 and r["counts"] == {"b4": 60},
          f"{VIP_ALT} served through a2: {r['counts']}, failures {r['failures']}")
    fleet.run_in("a1", *(["ip", "rule", "del"] + rule[3:]))
    t = wait_for(lambda: fleet.nexthops(VIP_ALT) == set(APPLIANCES), 10)
    check(t is not None, f"a1 announces {VIP_ALT} again once b4 passes its checks")


def streams(fleet, seconds, count, vip=VIP_WEB):
    ready = fleet.path(f"ready-{time.monotonic_ns()}")
    bg = fleet.client_background("streams", seconds, count, vip, ready)
    if wait_for(lambda: os.path.exists(ready), 30) is None:
        raise RuntimeError("the streaming connections did not come up")
    with open(ready) as f:
        pairs = json.load(f)
    on = {(src, sport): fleet.appliance_of(src, sport, vip) for src, sport in pairs}
    return bg, on


def survivors(result, on, appliance, after):
    """Connections that were on `appliance`: (those that went on without an
    error on one backend, answered after `after`; all of them)."""
    mine = [c for c in result["connections"] if on.get((c["src"], c["sport"])) == appliance]
    ok = [c for c in mine
          if c["error"] is None and len(c["backends"]) == 1 and (c["last"] or 0) > after]
    return ok, mine


def case_kill(fleet, count):
    print(f"case 3: kill -9 a1 under {count} long-lived connections")
    bg, on = streams(fleet, 16, count)
    per = {a: sum(1 for v in on.values() if v == a) for a in APPLIANCES}
    check(per["a1"] > 0 and per["a2"] > 0, f"connections on both appliances: {per}")
    time.sleep(2)
    t_kill = time.time()
    fleet.signal_sluice("a1", signal.SIGKILL)
    t = wait_for(lambda: fleet.nexthops(VIP_WEB) == {"a2"}, HOLD_TIME + 5, step=0.02)
    killed = fleet.sluice["a1"]
    killed.wait(timeout=10)
    report.append(f"kill -9: the router withdrew a1 in {t if t is None else round(t, 2)} s "
                  f"(BFD {BFD_DETECT} s, hold time {HOLD_TIME} s)")
    check(t is not None and t <= HOLD_TIME + 0.5,
          f"router withdrew a1 within the hold time {HOLD_TIME} s (took {t})")
    subprocess.run(["rm", "-rf", f"/var/run/dpdk/sluice-{killed.pid}"], check=False)
    result = fleet.collect(bg)
    ok, mine = survivors(result, on, "a1", t_kill + (t or 0) + 2)
    frac = len(ok) / max(len(mine), 1)
    lost = [c for c in mine if c not in ok][:5]
    report.append(f"kill -9: {len(ok)}/{len(mine)} connections on a1 survived through a2 "
                  f"({100 * frac:.1f} %), same backend; {per['a2']} were on a2")
    check(len(result["connections"]) >= 200 and frac >= 0.99,
          f">= 99 % of a1's connections went on through a2 on the same backend: "
          f"{len(ok)}/{len(mine)} (e.g. lost {lost})")
    ok2, mine2 = survivors(result, on, "a2", t_kill + 2)
    check(len(ok2) == len(mine2), f"a2's connections unaffected: {len(ok2)}/{len(mine2)}")
    gaps = sorted(c["gap"] for c in mine)
    if gaps:
        report.append(f"kill -9: longest pause of a1's connections {gaps[-1]:.1f} s "
                      f"(median {gaps[len(gaps) // 2]:.1f} s)")


def case_restart(fleet, count):
    print("case 6: a1 restarted: announced once ready; flows moving back keep their backend")
    bg, on = streams(fleet, 14, count)
    check(set(on.values()) == {"a2"}, f"everything on a2 while a1 is down: {set(on.values())}")
    started = time.monotonic()
    fleet.start_sluice("a1")
    samples = []

    def announced():
        hops = fleet.nexthops(VIP_WEB)
        ready = fleet.ready("a1")
        samples.append((time.monotonic() - started, ready, "a1" in hops))
        return "a1" in hops

    t = wait_for(announced, 40, step=0.05)
    check(t is not None, f"a1 announced again after its restart (took {t})")
    first_ready = next((s[0] for s in samples if s[1]), None)
    premature = [s for s in samples if s[2] and not s[1]]
    status = fleet.status("a1")
    healthy = status.split("service alt")[0].count(" healthy weight")
    report.append(f"restart: a1 ready after {first_ready and round(first_ready, 2)} s, "
                  f"announced after {t and round(t, 2)} s (its backends prove healthy first)")
    check(not premature and first_ready is not None and t >= first_ready,
          f"announced only once ready (ready {first_ready}, announced {t})")
    check(healthy >= 1, f"a1 has healthy backends for the VIP once announced ({healthy})")
    bfd = wait_for(lambda: re.search(rf"{APPLIANCES['a1']}\s+eth0\s+Up",
                                     fleet.birdc("r", "show", "bfd", "sessions")), 5)
    check(bfd is not None, "the router's BFD session to a1 is up again: "
          + fleet.birdc("r", "show", "bfd", "sessions").replace("\n", " | "))
    result = fleet.collect(bg)
    moved = [c for c in result["connections"]
             if fleet.appliance_of(c["src"], c["sport"]) == "a1"]
    ok = [c for c in result["connections"] if c["error"] is None and len(c["backends"]) == 1]
    report.append(f"restart: {len(moved)} of {len(result['connections'])} connections moved "
                  f"back to a1; {len(ok)} kept their backend without error")
    check(len(moved) > 0 and len(ok) >= 0.99 * len(result["connections"]),
          f"connections moving from a2 to a1 keep their backend: {len(ok)}/"
          f"{len(result['connections'])}")


def case_sigterm(fleet, count):
    print("case 4: SIGTERM a2 under traffic: withdrawn first, zero failed connections")
    check(fleet.nexthops(VIP_WEB) == set(APPLIANCES), "both appliances carry the VIP")
    bg, on = streams(fleet, 12, count)
    churn = fleet.client_background("churn", 8, 20, VIP_WEB)
    time.sleep(1.5)
    t0 = time.monotonic()
    fleet.signal_sluice("a2", signal.SIGTERM)
    t_withdrawn = wait_for(lambda: fleet.nexthops(VIP_WEB) == {"a1"}, DRAIN + 5, step=0.02)
    exited = wait_for(lambda: fleet.sluice["a2"].poll() is not None, DRAIN + 20, step=0.05)
    t_exit = None if exited is None else time.monotonic() - t0
    report.append(f"SIGTERM: the router withdrew a2 in {t_withdrawn and round(t_withdrawn, 2)} "
                  f"s; a2 exited after {t_exit and round(t_exit, 2)} s (drain_time {DRAIN} s), "
                  f"exit status {fleet.sluice['a2'].returncode}")
    check(t_withdrawn is not None and t_exit is not None and t_withdrawn < t_exit
          and t_exit >= DRAIN, f"withdrawn ({t_withdrawn} s) before a2 stopped ({t_exit} s)")
    check(fleet.sluice["a2"].returncode == 0, "a2 stopped cleanly")
    result = fleet.collect(bg)
    c = fleet.collect(churn)
    errors = [x for x in result["connections"] if x["error"] or len(x["backends"]) != 1]
    per = {a: sum(1 for v in on.values() if v == a) for a in APPLIANCES}
    report.append(f"SIGTERM: {len(result['connections'])} connections ({per}), {len(errors)} "
                  f"failed; {sum(c['counts'].values())} new connections, {c['failures']} failed")
    check(not errors and c["failures"] == 0,
          f"zero failed connections (held {errors[:3]}, new {c['failures']} {c['errors']})")


def report_cpu(fleet, wall):
    for a, runs in fleet.cpu.items():
        parts = []
        for run in runs:
            if len(run) == 4:
                pid, started, used, ended = run
                parts.append(f"{100 * used / max(ended - started, 1e-3):.0f} %")
        report.append(f"CPU of sluice {a} (main + 1 worker, per run): {', '.join(parts)} "
                      f"of one core{' (idle polling: ' + fleet.idle + ')' if fleet.idle else ' (busy polling)'}")
    report.append(f"suite wall time {wall:.0f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "target", "debug", "sluice"))
    ap.add_argument("--connections", type=int, default=240)
    ap.add_argument("--idle", default=os.environ.get("SLUICE_SCALEOUT_IDLE"),
                    help="a [dataplane] idle value for both appliances (TOML)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("scaleout: needs root (network namespaces)")
    for tool in ("bird", "birdc", "curl"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"scaleout: {tool} not found: run scripts/setup.sh (installs bird2)")
    fleet = Fleet(os.path.abspath(a.sluice), a.idle)
    started = time.monotonic()
    try:
        fleet.build()
        for i in (1, 2, 3, 4):
            fleet.start_backend(i)
        fleet.start_router_bird()
        for ap_ in APPLIANCES:
            fleet.write_config(ap_)
            fleet.start_sluice(ap_)
            fleet.start_appliance_bird(ap_)
        for ap_ in APPLIANCES:
            t = fleet.wait_ready(ap_)
            check(t is not None, f"{ap_} ready (took {t})")
        case_announce_and_split(fleet, 400)
        case_digests(fleet)
        case_one_vip_unhealthy(fleet)
        case_kill(fleet, a.connections)
        case_restart(fleet, 160)
        case_sigterm(fleet, 160)
        fleet.signal_sluice("a1", signal.SIGTERM)
        fleet.sluice["a1"].wait(timeout=DRAIN + 20)
    except Exception as e:  # noqa: BLE001 — reported as a failure below
        failures.append(f"suite error: {e!r}")
        print(f"  FAIL {e!r}")
    finally:
        if failures:
            for name in ("sluice-a1", "sluice-a2", "bird-r", "bird-a1", "bird-a2"):
                print(f"--- {name} log (tail) ---\n{fleet.log(name)[-2500:]}")
            print(f"--- router's BIRD log (tail) ---\n{fleet.log('bird-r')[-1500:]}")
        report_cpu(fleet, time.monotonic() - started)
        fleet.close()
    print(f"scale-out ({time.monotonic() - started:.0f} s):")
    for line in report:
        print(f"  {line}")
    if failures:
        print(f"scaleout: {len(failures)} failure(s)")
        for f in failures:
            print(f"  - {f}")
        sys.exit(1)
    print("scaleout: all passed")


if __name__ == "__main__":
    main()
