"""The live lab: network namespaces joined by a bridge, sluice in its own
namespace on net_af_packet over a veth, real kernel clients and backends.

    client ns (10.99.0.100) ─┐
    sluice ns: lb0 (no IP; DPDK net_af_packet), TAP sl-up 10.99.0.2 ─┤ bridge
    backend ns b1..b4 (10.99.0.11..14, VIP 10.99.1.10 on lo) ────────┘ (switch ns)

The client routes the VIP via the appliance (10.99.0.2); backends answer
clients directly (layer-2 DSR). Everything is torn down on exit, on a
signal, and — for namespaces left by a killed earlier run — at start.

sluice's conntrack hand-off file is `conntrack.handoff` in the lab's
temporary directory (never the default under /run/sluice): a stop by
SIGTERM writes it, the next start of the same configuration path takes
it. `start_sluice(handoff=False)` runs with `--no-handoff`.
"""

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import netns

SUBNET = "10.99.0"
APPLIANCE = f"{SUBNET}.2"
CLIENT = f"{SUBNET}.100"
VIP = "10.99.1.10"
# IPv6: the same layout (ND instead of ARP through the TAP).
SUBNET6 = "fd99::"
APPLIANCE6 = "fd99::2"
CLIENT6 = "fd99::100"
VIP6 = "fd99:1::10"
# The default gateway of the appliance's port (held by b4), and a backend
# address behind it (nothing answers there: its next hop is the gateway).
GATEWAY = f"{SUBNET}.1"
REMOTE_BACKEND = "10.98.0.5"
# The admin listener inside the appliance's namespace (/metrics, /ready).
METRICS = "127.0.0.1:9064"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PREFIX = "sle"


def sh(*cmd, check=True, capture=False):
    r = subprocess.run(cmd, check=False, text=True, capture_output=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout if capture else r


class Lab:
    def __init__(self, workers=1, backends=3, sluice=None, quiet=False, prefix=PREFIX):
        self.prefix = prefix
        self.tag = f"{prefix}{os.getpid()}"
        self.workers = workers
        self.nbackends = backends
        self.quiet = quiet
        self.sluice_bin = sluice or os.path.join(ROOT, "target", "debug", "sluice")
        self.dir = tempfile.mkdtemp(prefix="sluice-e2e.")
        self.state = os.path.join(self.dir, "state")
        os.makedirs(self.state)
        self.config = os.path.join(self.dir, "sluice.toml")
        self.socket = os.path.join(self.dir, "sluice.sock")
        self.handoff_file = os.path.join(self.dir, "conntrack.handoff")
        self.sluice_log = os.path.join(self.dir, "sluice.log")
        self.namespaces = []
        self.procs = {}
        self.sluice = None
        self.closed = False
        atexit.register(self.close)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame):
        self.close()
        sys.exit(128 + signum)

    def ns(self, role):
        return f"{self.tag}-{role}"

    def run_in(self, role, *cmd, check=True, capture=True):
        return sh("ip", "netns", "exec", self.ns(role), *cmd, check=check, capture=capture)

    def log(self, msg):
        if not self.quiet:
            print(msg, flush=True)

    # ---- topology -------------------------------------------------------

    def build(self):
        netns.remove_stale(self.prefix)
        for role in ["sw", "lb", "c"] + [f"b{i}" for i in range(1, 5)]:
            sh("ip", "netns", "add", self.ns(role))
            self.namespaces.append(self.ns(role))
            self.run_in(role, "ip", "link", "set", "lo", "up")
        self.run_in("sw", "ip", "link", "add", "br0", "type", "bridge")
        self.run_in("sw", "ip", "link", "set", "br0", "up")
        self._plug("lb", "lb0")
        self._plug("c", "eth0")
        for i in range(1, 5):
            self._plug(f"b{i}", "eth0")
        # The DPDK port: the kernel must neither answer on it (no ARP, no
        # IPv6) nor accept IP from it (strict reverse-path filter: replies
        # to the appliance's address arrive through the TAP only, AP-4).
        self.run_in("lb", "ip", "link", "set", "lb0", "arp", "off")
        self._sysctl("lb", "net.ipv6.conf.lb0.disable_ipv6=1",
                     "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.lb0.rp_filter=1")
        self.run_in("c", "ip", "addr", "add", f"{CLIENT}/24", "dev", "eth0")
        self.run_in("c", "ip", "route", "add", f"{VIP}/32", "via", APPLIANCE)
        self.run_in("c", "ip", "addr", "add", f"{CLIENT6}/64", "dev", "eth0", "nodad")
        self.run_in("c", "ip", "route", "add", f"{VIP6}/128", "via", APPLIANCE6)
        for i in range(1, 5):
            b = f"b{i}"
            self.run_in(b, "ip", "addr", "add", f"{self.backend_ip(i)}/24", "dev", "eth0")
            self.run_in(b, "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
            if i == 4:
                self.run_in(b, "ip", "addr", "add", f"{GATEWAY}/24", "dev", "eth0")
            self.run_in(b, "ip", "addr", "add", f"{SUBNET6}{10 + i}/64", "dev", "eth0", "nodad")
            self.run_in(b, "ip", "addr", "add", f"{VIP6}/128", "dev", "lo")
            # DSR backends: hold the VIP, never answer ARP for it.
            self._sysctl(b, "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
                         "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.eth0.rp_filter=0",
                         "net.ipv4.conf.lo.rp_filter=0")

    def _plug(self, role, ifname):
        peer = f"p-{role}"
        sh("ip", "link", "add", ifname, "netns", self.ns(role), "type", "veth",
           "peer", "name", peer, "netns", self.ns("sw"))
        self.run_in("sw", "ip", "link", "set", peer, "master", "br0", "up")
        self.run_in(role, "ip", "link", "set", ifname, "up")
        # veth checksum offload leaves TCP/UDP checksums to be filled in by
        # the receiving kernel; af_packet would hand DPDK such unfinished
        # frames, which a real wire never carries. Segmentation offload
        # would hand it 64 KB frames.
        self.run_in(role, "ethtool", "-K", ifname, "tx", "off", "tso", "off", "gso", "off",
                    check=False)

    def _sysctl(self, role, *settings):
        self.run_in(role, "sysctl", "-qw", *settings)

    @staticmethod
    def backend_ip(i):
        return f"{SUBNET}.{10 + i}"

    # ---- backends ---------------------------------------------------------

    def start_backend(self, i):
        name = f"b{i}"
        log = open(os.path.join(self.dir, f"{name}.log"), "a")
        self.procs[name] = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(name), sys.executable,
             os.path.join(HERE, "backend.py"), "--name", name, "--vip", VIP,
             "--state", self.state],
            stdout=log, stderr=log)
        # Wait until it listens.
        for _ in range(100):
            r = self.run_in(name, "ss", "-ltn", "sport = :80", check=False)
            if ":80" in r:
                return
            time.sleep(0.05)
        raise RuntimeError(f"backend {name} did not start listening")

    def stop_backend(self, i):
        p = self.procs.pop(f"b{i}", None)
        if p:
            p.terminate()
            p.wait(timeout=5)

    def set_health(self, i, healthy):
        path = os.path.join(self.state, f"b{i}.down")
        if healthy:
            if os.path.exists(path):
                os.remove(path)
        else:
            open(path, "w").close()

    # ---- sluice -------------------------------------------------------------

    def write_config(self, backends, failover=(), delivery=('encapsulation = "l2"',) * 2,
                     check_path="direct", udp_balance='session_affinity = "CLIENT_IP"'):
        """The lab's configuration with `backends`; those also in `failover`
        are the web service's failover pool (`failover = true`). `delivery`:
        the TOML lines choosing the encapsulation of the web and web6
        services (layer-2 DSR by default). `check_path`: the HTTP check's
        `path` ("direct", or "data": through the data path to each VIP).
        `udp_balance`: the TOML lines choosing how the UDP service balances
        (CLIENT_IP affinity by default)."""
        web_delivery, web6_delivery = delivery
        web = ",\n  ".join(
            f'{{ address = "{self.backend_ip(i)}"' + (", failover = true" if i in failover else "")
            + " }" for i in backends)
        bl = ",\n  ".join(f'{{ address = "{self.backend_ip(i)}" }}' for i in backends)
        bl6 = ",\n  ".join(f'{{ address = "{SUBNET6}{10 + i}" }}' for i in backends)
        qpairs = f",qpairs={self.workers}" if self.workers > 1 else ""
        text = f"""# Written by scripts/e2e/lab.py
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--log-level=error"]
workers = {self.workers}

[[dataplane.port]]
name = "uplink"
device = "net_af_packet0,iface=lb0{qpairs}"
address = "{APPLIANCE}/24"
address6 = "{APPLIANCE6}/64"
tap = "sl-up"
# b4 doubles as the lab's router (it holds {GATEWAY}): backends outside the
# subnet are reached through it.
gateway = "{GATEWAY}"

[metrics]
listen = "{METRICS}"

[[health_check]]
name = "http"
type = "HTTP"
port = 80
request_path = "/health"
path = "{check_path}"
check_interval = "1s"
timeout = "500ms"
healthy_threshold = 2
unhealthy_threshold = 2

# The UDP service's: always direct (its rule takes no TCP port 80). The
# same probe as "http" when that one is direct too.
[[health_check]]
name = "http-direct"
type = "HTTP"
port = 80
request_path = "/health"
check_interval = "1s"
timeout = "500ms"
healthy_threshold = 2
unhealthy_threshold = 2

[[backend_service]]
name = "web"
{web_delivery}
health_check = "http"
backend = [
  {web},
]

[[backend_service]]
name = "udp"
encapsulation = "l2"
{udp_balance}
health_check = "http-direct"
backend = [
  {bl},
]

# No rule uses it: it shows a next hop resolved through the gateway.
[[backend_service]]
name = "remote"
encapsulation = "gre"
backend = [ {{ address = "{REMOTE_BACKEND}" }} ]

[[forwarding_rule]]
name = "web"
vip = "{VIP}"
protocol = "TCP"
ports = "80"
backend_service = "web"

# The IPv6 VIP's backends are the same hosts by their IPv6 addresses: their
# next hops are resolved by neighbour discovery through the TAP.
[[backend_service]]
name = "web6"
{web6_delivery}
health_check = "http"
backend = [
  {bl6},
]

[[forwarding_rule]]
name = "web6"
vip = "{VIP6}"
protocol = "TCP"
ports = "80"
backend_service = "web6"

[[forwarding_rule]]
name = "udp"
vip = "{VIP}"
protocol = "UDP"
ports = "5000"
backend_service = "udp"
"""
        with open(self.config, "w") as f:
            f.write(text)

    def handoff_args(self, handoff=True):
        """The hand-off options of `sluice run`: True, the lab's file; a
        path, that file; False, `--no-handoff`."""
        if handoff is False:
            return ["--no-handoff"]
        return ["--handoff-file", self.handoff_file if handoff is True else handoff]

    def start_sluice(self, handoff=True, wait=True):
        """Starts `sluice run` on the lab's configuration path; with `wait`,
        returns once its control socket exists and /metrics answers."""
        log = open(self.sluice_log, "a")
        self.sluice_log_start = log.tell()
        self.sluice = subprocess.Popen(
            ["ip", "netns", "exec", self.ns("lb"), self.sluice_bin, "run",
             "--config", self.config, "--control-socket", self.socket,
             *self.handoff_args(handoff)],
            stdout=log, stderr=log)
        if not wait:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.sluice.poll() is not None:
                raise RuntimeError(f"sluice exited {self.sluice.returncode}:\n{self.sluice_output()}")
            if os.path.exists(self.socket) and self.metrics(quiet=True):
                return
            time.sleep(0.1)
        raise RuntimeError("sluice did not come up:\n" + self.sluice_output())

    def sluice_output(self, since=0):
        """sluice's log (every run of the lab), from byte offset `since`."""
        with open(self.sluice_log) as f:
            f.seek(since)
            return f.read()

    def stop_sluice(self):
        if self.sluice is None:
            return None
        self.sluice.send_signal(signal.SIGTERM)
        try:
            rc = self.sluice.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.sluice.kill()
            rc = self.sluice.wait()
        self.sluice = None
        return rc

    def ready(self):
        """Whether sluice's /ready answers 200 (ports started, workers
        running, first snapshot published, links up)."""
        r = self.run_in("lb", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "1",
                        f"http://{METRICS}/ready", check=False)
        return isinstance(r, str) and r.strip() == "200"

    def restart_sluice(self, rewrite=None, handoff=True, timeout=30):
        """SIGTERM, wait for the exit, `rewrite()` (e.g. a new configuration
        at the same path), start again. Returns the exit code, the log of
        the stop and the times in seconds from the SIGTERM to the exit and
        to the new process's /ready (polled every 20 ms)."""
        mark = os.path.getsize(self.sluice_log)
        t0 = time.monotonic()
        rc = self.stop_sluice()
        exited = time.monotonic() - t0
        stop_log = self.sluice_output(mark)
        if rewrite is not None:
            rewrite()
        self.start_sluice(handoff, wait=False)
        while not self.ready():
            if self.sluice.poll() is not None:
                raise RuntimeError(f"sluice exited {self.sluice.returncode}:\n"
                                   f"{self.sluice_output(self.sluice_log_start)}")
            if time.monotonic() - t0 > timeout:
                raise RuntimeError("restarted sluice not ready:\n"
                                   + self.sluice_output(self.sluice_log_start))
            time.sleep(0.02)
        ready = time.monotonic() - t0
        while not os.path.exists(self.socket) and time.monotonic() - t0 < timeout:
            time.sleep(0.02)
        return {"rc": rc, "exited": exited, "ready": ready, "stop_log": stop_log}

    def discard_handoff(self):
        """Removes a hand-off file left by the last stop, so that the next
        start begins with empty conntrack."""
        if os.path.exists(self.handoff_file):
            os.remove(self.handoff_file)

    def status(self):
        return sh(self.sluice_bin, "status", "--control-socket", self.socket, capture=True)

    def reload(self):
        return sh(self.sluice_bin, "reload", "--control-socket", self.socket, check=False)

    def metrics(self, quiet=False):
        """The scrape as {name{labels}: value}, read inside sluice's namespace."""
        r = self.run_in("lb", sys.executable, "-c",
                        "import urllib.request,sys;"
                        "sys.stdout.write(urllib.request.urlopen("
                        f"'http://{METRICS}/metrics', timeout=2).read().decode())",
                        check=not quiet)
        out = {}
        text = r if isinstance(r, str) else ""
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out

    def backend_states(self, service="web"):
        """{backend ip: healthy|unhealthy|draining} for one service."""
        return {ip: f[4] for ip, f in self.backend_lines(service).items()}

    def backend_lines(self, service="web"):
        """{backend ip: the fields of its `sluice status` line}."""
        lines, inside = {}, False
        for line in self.status().splitlines():
            if line.startswith("service "):
                inside = line.startswith(f"service {service}:")
            elif inside and line.strip().startswith("backend "):
                f = line.split()
                lines[f[1]] = f
        return lines

    # ---- clients ------------------------------------------------------------

    def client(self, *args):
        out = self.run_in("c", sys.executable, os.path.join(HERE, "client.py"),
                          *[str(a) for a in args])
        return json.loads(out)

    def client_background(self, *args):
        path = os.path.join(self.dir, f"client-{time.monotonic_ns()}.json")
        f = open(path, "w")
        p = subprocess.Popen(
            ["ip", "netns", "exec", self.ns("c"), sys.executable,
             os.path.join(HERE, "client.py"), *[str(a) for a in args]],
            stdout=f, stderr=subprocess.DEVNULL)
        return p, path

    @staticmethod
    def collect(bg):
        p, path = bg
        p.wait(timeout=120)
        with open(path) as f:
            return json.loads(f.read())

    # ---- teardown -------------------------------------------------------------

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            self.stop_sluice()
        except Exception:  # noqa: BLE001 — teardown goes on regardless
            pass
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        if os.environ.get("SLUICE_E2E_KEEP") is None:
            subprocess.run(["rm", "-rf", self.dir], check=False)


def run_test(name, prefix, body, report, failures):
    """The frame of a live test script: `--sluice`, root, a one-worker lab,
    `body(lab)` with any exception a failure, sluice's log on failure, the
    report, and exit status 1 when `failures` (checks.failures) is not
    empty."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", help="binary (default target/debug/sluice)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit(f"{name}: needs root (network namespaces)")
    lab = Lab(workers=1, sluice=a.sluice and os.path.abspath(a.sluice), prefix=prefix)
    if not os.access(lab.sluice_bin, os.X_OK):
        sys.exit(f"{name}: {lab.sluice_bin} not built")
    started = time.monotonic()
    try:
        lab.build()
        body(lab)
    except Exception as e:  # noqa: BLE001 — reported as a failure below
        failures.append(f"{name} error: {e}")
        print(f"  FAIL {e}")
    finally:
        if failures and lab.sluice is not None:
            print("--- sluice log ---\n"
                  + lab.sluice_output(getattr(lab, "sluice_log_start", 0))[-4000:])
        lab.close()
    print(f"{name} ({time.monotonic() - started:.0f} s):")
    for line in report:
        print(f"  {line}")
    if failures:
        print(f"{name}: {len(failures)} failure(s)")
        for f in failures:
            print(f"  - {f}")
        sys.exit(1)
    print(f"{name}: all passed")
