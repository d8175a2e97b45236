#!/usr/bin/env python3
"""Traffic through the booted appliance VM (run by scripts/image/boot-test.sh
once sluice.service is active).

    client ns c (10.99.0.100) ────────────────────────────────┐
    backend ns b1, b2 (10.99.0.11/.12, VIP 10.99.1.10 on lo) ─┤ bridge br0 (ns sw)
    vlan_switch.py: access veth vl0 ──────────────────────────┘
                    trunk: the VM's data NIC's TAP, VLAN 100 tagged

The VM's data NIC is a trunk port carrying VLAN 100 (sluice drives it
with vfio-pci and net_virtio, `vlan = 100`); vlan_switch.py is the switch
that tags and untags between it and the hosts' untagged bridge (this
host kernel has no 802.1Q), and counts anything the VM sends untagged or
on another VLAN: it must be nothing. The client routes the VIP via the appliance's
address (10.99.0.2, held by sluice's TAP inside the VM); backends answer
clients directly (layer-2 DSR). Commands inside the VM go over SSH through
QEMU's user-mode management NIC.

Checks, in order: health checks from the appliance reach both backends;
the appliance's address answers ping; new connections to the VIP are
served by both backends; /metrics from the host counts the traffic;
sluice put the data NIC (two queue pairs, VIRTIO_NET_F_RSS) on RSS on
5-tuples, and one client address's connections land on both workers'
shards with none steered;
`systemctl reload` with a good configuration (b1 only) applies it; with a
bad one it fails ("Reload failed", diagnostics in the journal) and the
running configuration stays; `kill -9` of sluice is followed by a restart
by systemd, which keeps /run/sluice, after which new connections flow
again; keep-alive connections held through the VIP (hold_client.py) stay
on their backends across `systemctl restart` through the conntrack
hand-off (placed where the NIC's RSS, modelled, sends each), although
the configuration written before it moves them in the Maglev table, and
are reset across `systemctl stop` and `start`, which
lose the file; with [bgp], `systemctl stop` drains for drain_time past
TimeoutStopSec.

Usage: boot_traffic.py --tap TAP --ssh-port P --ssh-key KEY --metrics-port M
Prints one line per check and `boot-traffic: N passed, 0 failed`; exits 1 on
the first failed check (the VM's journal of sluice is printed).
"""

import argparse
import atexit
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
E2E = os.path.join(ROOT, "scripts", "e2e")
CONFIG = os.path.join(HERE, "boot-test", "sluice.toml")
VLAN = 100
APPLIANCE = "10.99.0.2"
CLIENT = "10.99.0.100"
VIP = "10.99.1.10"
BACKENDS = {"b1": "10.99.0.11", "b2": "10.99.0.12"}
PREFIX = "slvm"


def sh(*cmd, check=True, timeout=120):
    r = subprocess.run(cmd, check=False, text=True, capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


class CheckFailed(Exception):
    pass


class BootTraffic:
    def __init__(self, args):
        self.tap = args.tap
        self.dir = tempfile.mkdtemp(prefix="sluice-boot-traffic.")
        # One SSH connection (a control master) carries every command: a
        # new connection's key exchange takes a second or more under TCG.
        self.ssh_opts = ["-i", args.ssh_key, "-p", str(args.ssh_port),
                         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                         "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=20",
                         "-o", "BatchMode=yes", "-o", "ControlMaster=auto",
                         "-o", f"ControlPath={self.dir}/ssh-%C", "-o", "ControlPersist=300"]
        self.ssh_base = ["ssh", *self.ssh_opts, "root@127.0.0.1"]
        self.metrics_url = f"http://127.0.0.1:{args.metrics_port}/metrics"
        self.tag = f"{PREFIX}{os.getpid()}"
        self.state = os.path.join(self.dir, "state")
        os.makedirs(self.state)
        self.namespaces = []
        self.procs = []
        self.passed = 0
        atexit.register(self.close)

    # ---- plumbing -----------------------------------------------------------

    def ns(self, role):
        return f"{self.tag}-{role}"

    def run_in(self, role, *cmd, check=True, timeout=120):
        return sh("ip", "netns", "exec", self.ns(role), *cmd, check=check, timeout=timeout)

    def vm(self, command, check=True, timeout=120):
        """Runs a shell command in the VM; returns (rc, stdout+stderr)."""
        r = subprocess.run(self.ssh_base + [command], text=True, capture_output=True,
                           timeout=timeout, check=False)
        out = r.stdout + r.stderr
        if check and r.returncode != 0:
            raise CheckFailed(f"in the VM, `{command}` exited {r.returncode}: {out.strip()}")
        return r.returncode, out

    def ok(self, what):
        self.passed += 1
        print(f"boot-traffic: ok: {what}", flush=True)

    def expect(self, cond, what, detail=""):
        if not cond:
            raise CheckFailed(f"{what}{': ' + detail if detail else ''}")
        self.ok(what)

    # ---- the host network -----------------------------------------------------

    def build(self):
        for line in sh("ip", "netns", "list").stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            m = re.fullmatch(rf"{PREFIX}(\d+)-\w+", name)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                sh("ip", "netns", "del", name, check=False)
        for role in ["sw", "c", *BACKENDS]:
            sh("ip", "netns", "add", self.ns(role))
            self.namespaces.append(self.ns(role))
            self.run_in(role, "ip", "link", "set", "lo", "up")
        self.run_in("sw", "ip", "link", "add", "br0", "type", "bridge")
        self.run_in("sw", "ip", "link", "set", "br0", "up")
        # QEMU holds the TAP open; the device moves, its queue stays attached.
        # The switch's own kernel sends nothing on either side of it.
        sh("ip", "link", "set", self.tap, "netns", self.ns("sw"))
        self.run_in("sw", "ip", "link", "add", "vl0", "type", "veth", "peer", "name", "p-vm")
        self.run_in("sw", "ip", "link", "set", "p-vm", "master", "br0", "up")
        for dev in (self.tap, "vl0"):
            self.run_in("sw", "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            self.run_in("sw", "ip", "link", "set", dev, "arp", "off", "up")
        log = open(os.path.join(self.dir, "vlan_switch.log"), "a")
        self.switch_stats = os.path.join(self.dir, "vlan-switch.json")
        self.switch = subprocess.Popen(
            ["ip", "netns", "exec", self.ns("sw"), sys.executable,
             os.path.join(HERE, "vlan_switch.py"), "--trunk", self.tap, "--access", "vl0",
             "--vlan", str(VLAN), "--stats", self.switch_stats], stdout=log, stderr=log)
        self.procs.append(self.switch)
        hosts = {"c": CLIENT, **BACKENDS}
        for role, addr in hosts.items():
            peer = f"p-{role}"
            sh("ip", "link", "add", "eth0", "netns", self.ns(role), "type", "veth",
               "peer", "name", peer, "netns", self.ns("sw"))
            self.run_in("sw", "ip", "link", "set", peer, "master", "br0", "up")
            self.run_in(role, "ip", "link", "set", "eth0", "up")
            # Complete checksums and no segmentation offload: the VM's NIC
            # gets frames as a wire would carry them.
            self.run_in(role, "ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off",
                        check=False)
            self.run_in(role, "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
        self.run_in("c", "ip", "route", "add", f"{VIP}/32", "via", APPLIANCE)
        for role in BACKENDS:
            self.run_in(role, "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
            # DSR backends: hold the VIP, never answer ARP for it.
            self.run_in(role, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1",
                        "net.ipv4.conf.all.arp_announce=2", "net.ipv4.conf.all.rp_filter=0",
                        "net.ipv4.conf.eth0.rp_filter=0", "net.ipv4.conf.lo.rp_filter=0")
            log = open(os.path.join(self.dir, f"{role}.log"), "a")
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", self.ns(role), sys.executable,
                 os.path.join(E2E, "backend.py"), "--name", role, "--vip", VIP,
                 "--state", self.state], stdout=log, stderr=log))
        for role in BACKENDS:
            for _ in range(100):
                if ":80" in self.run_in(role, "ss", "-ltn", "sport = :80").stdout:
                    break
                time.sleep(0.05)
            else:
                raise CheckFailed(f"backend {role} did not start listening")

    def close(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        self.namespaces = []
        try:
            subprocess.run(["ssh", *self.ssh_opts, "-O", "exit", "root@127.0.0.1"],
                           capture_output=True, timeout=30, check=False)
        except subprocess.TimeoutExpired:
            pass
        subprocess.run(["rm", "-rf", self.dir], check=False)

    # ---- observations -------------------------------------------------------------

    def spread(self, n):
        out = self.run_in("c", sys.executable, os.path.join(E2E, "client.py"), "spread", str(n),
                          timeout=300).stdout
        return json.loads(out)

    def backend_states(self):
        """{backend ip: state} of service web, from `sluice status` in the VM."""
        _, out = self.vm("sluice status --control-socket /run/sluice/sluice.sock")
        states, inside = {}, False
        for line in out.splitlines():
            if line.startswith("service "):
                inside = line.startswith("service web:")
            elif inside and line.strip().startswith("backend "):
                f = line.split()
                states[f[1]] = f[4]
        return states

    def metrics(self):
        text = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out

    def wait_healthy(self, ips, timeout):
        deadline = time.monotonic() + timeout
        states = {}
        while time.monotonic() < deadline:
            states = self.backend_states()
            if all(states.get(ip) == "healthy" for ip in ips):
                return states
            time.sleep(2)
        raise CheckFailed(f"backends {sorted(ips)} not healthy within {timeout}s: {states}")

    def switch_counters(self):
        with open(self.switch_stats, encoding="utf-8") as f:
            return json.load(f)

    def write_config(self, text):
        self.vm(f"cat > /etc/sluice/sluice.toml <<'SLUICE_EOF'\n{text}SLUICE_EOF")

    def main_pid(self):
        _, out = self.vm("systemctl show -p MainPID --value sluice.service")
        return int(out.strip() or 0)

    def unit_show(self, *props):
        """{property: value} of sluice.service from `systemctl show`."""
        _, out = self.vm("systemctl show " + " ".join(f"-p {p}" for p in props)
                         + " sluice.service")
        return dict(line.split("=", 1) for line in out.strip().splitlines() if "=" in line)

    def journal_of(self, invocation):
        """sluice's journal of one invocation of the unit (InvocationID)."""
        _, out = self.vm(f"journalctl _SYSTEMD_INVOCATION_ID={invocation} --no-pager -o cat")
        return out

    def gap(self):
        """Seconds from the last stop's SIGTERM (the unit left active) to
        READY=1 of the process that followed, and its stop and start parts."""
        t = {k: int(v) / 1e6 for k, v in self.unit_show(
            "ActiveExitTimestampMonotonic", "InactiveEnterTimestampMonotonic",
            "InactiveExitTimestampMonotonic", "ActiveEnterTimestampMonotonic").items()}
        return (t["ActiveEnterTimestampMonotonic"] - t["ActiveExitTimestampMonotonic"],
                t["InactiveEnterTimestampMonotonic"] - t["ActiveExitTimestampMonotonic"],
                t["ActiveEnterTimestampMonotonic"] - t["InactiveExitTimestampMonotonic"])

    def hold(self, k):
        """K keep-alive connections held open through the VIP
        (hold_client.py), once each has its first answer: (process,
        backend name per connection)."""
        p = subprocess.Popen(["ip", "netns", "exec", self.ns("c"), sys.executable,
                              os.path.join(HERE, "hold_client.py"), str(k)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        ready = json.loads(p.stdout.readline() or "{}").get("ready")
        if not ready or None in ready:
            raise CheckFailed(f"{k} held connections through the VIP did not all get an "
                              f"answer: {ready}")
        return p, ready

    def release(self, p):
        """Ends held connections: each completes one more request; their
        report."""
        p.stdin.write("stop\n")
        p.stdin.flush()
        out = p.stdout.readline()
        p.wait(timeout=30)
        self.procs.remove(p)
        if not out:
            raise CheckFailed("the holding client reported nothing")
        return json.loads(out)

    # ---- the checks -----------------------------------------------------------------

    def unit_sandbox(self):
        """The packaged unit's sandbox holds while sluice forwards: the
        system call filter and no-new-privileges are on, the capability
        bounding set is the unit's three, the TAP's disable_ipv6 was
        written through the read-only /proc/sys, and the control socket
        is 0660 of group sluice, open to its members only."""
        pid = self.main_pid()
        _, status = self.vm(f"grep -E '^(Seccomp|NoNewPrivs|CapBnd):' /proc/{pid}/status")
        fields = dict(line.split(":", 1) for line in status.strip().splitlines())
        fields = {k: v.strip() for k, v in fields.items()}
        # CAP_CHOWN (0), CAP_NET_ADMIN (12), CAP_NET_RAW (13).
        self.expect(fields.get("Seccomp") == "2" and fields.get("NoNewPrivs") == "1"
                    and int(fields.get("CapBnd", "0"), 16) == (1 << 0) | (1 << 12) | (1 << 13),
                    "sluice runs under the unit's system call filter, no new privileges and "
                    "its three capabilities", json.dumps(fields))
        _, v = self.vm("cat /proc/sys/net/ipv6/conf/sluice0/disable_ipv6")
        self.expect(v.strip() == "1",
                    "the TAP's disable_ipv6 was written under ProtectKernelTunables", v)
        _, mode = self.vm("stat -c '%a %G' /run/sluice/sluice.sock")
        self.expect(mode.strip() == "660 sluice", "the control socket is 0660, group sluice", mode)
        self.vm("id sluice-op >/dev/null 2>&1 || useradd --system --no-create-home "
                "--groups sluice sluice-op")
        rc, out = self.vm("runuser -u sluice-op -- sluice status", check=False)
        self.expect(rc == 0 and "10.99.0.11" in out,
                    "a member of the group sluice gets `sluice status`", out[-500:])
        rc, out = self.vm("runuser -u nobody -- sluice status", check=False)
        self.expect(rc != 0 and "ermission denied" in out,
                    "a user outside the group sluice is refused", out[-500:])
        _, score = self.vm("systemd-analyze security --no-pager sluice.service | tail -1",
                           check=False)
        m = re.search(r"exposure level for sluice.service: ([0-9.]+)", score)
        self.expect(m is not None and float(m.group(1)) <= 3.0,
                    f"systemd-analyze security on the running unit: {score.strip()}", score)

    def one_client_on_every_worker(self):
        """AP-1 on a NIC's RSS: the data NIC (virtio-net with
        VIRTIO_NET_F_RSS, two queue pairs) hashes TCP on its 5-tuple with
        sluice's key and table, so one client address's connections land on
        both workers' shards and none is steered between them."""
        _, journal = self.vm("journalctl -u sluice.service -b --no-pager -o cat")
        line = next((l for l in journal.splitlines() if "RSS on 5-tuples for port(s)" in l), "")
        self.expect(line != "", f"sluice put the data NIC's RSS on 5-tuples: {line.strip()!r}",
                    journal[-1500:])
        n = 120
        before = self.metrics()
        res = self.spread(n)
        after = self.metrics()
        steered = (after.get('sluice_steered_packets_total{direction="out"}', 0)
                   - before.get('sluice_steered_packets_total{direction="out"}', 0))
        entries = [after.get(f'sluice_conntrack_entries{{worker="{w}"}}', 0) for w in (0, 1)]
        self.expect(res["failures"] == 0 and steered == 0 and sum(entries) >= n
                    and min(entries) >= 0.3 * sum(entries),
                    f"{n} connections from one client address: conntrack entries per worker "
                    f"{[int(e) for e in entries]}, {int(steered)} packets steered, "
                    f"{res['failures']} failures", json.dumps({"res": res, "entries": entries}))

    def handoff_across_restart(self, good):
        """`systemctl restart` of the packaged unit keeps established
        connections on their backends: the stopping sluice writes its
        conntrack to /run/sluice/conntrack.handoff, the unit's
        RuntimeDirectoryPreserve=restart keeps /run/sluice, and the new
        process takes the file before its workers start. The configuration
        written (not reloaded) before the restart gives the backend holding
        the most connections weight 0, so the new Maglev table sends none
        of its flows there: only the handed-over entries keep them on it.
        Then the same change the other way with `systemctl stop` and
        `start`: systemd removes /run/sluice at the stop, the file with it,
        and the connections the table moves are reset."""
        t0 = time.monotonic()
        k = 8
        ip_of = {name: ip for name, ip in BACKENDS.items()}
        held, ready = self.hold(k)
        moved = max(sorted(BACKENDS), key=ready.count)
        other = next(b for b in sorted(BACKENDS) if b != moved)
        entry = f'{{ address = "{ip_of[moved]}" }}'
        assert entry in good
        self.write_config(good.replace(entry, f'{{ address = "{ip_of[moved]}", weight = 0 }}'))
        old = self.unit_show("InvocationID", "MainPID")
        t = time.monotonic()
        rc, out = self.vm("systemctl restart sluice.service", check=False, timeout=180)
        took = time.monotonic() - t
        new = self.unit_show("InvocationID", "MainPID")
        gap, stopping, starting = self.gap()
        res = self.release(held)
        self.expect(rc == 0 and new["MainPID"] != old["MainPID"],
                    f"systemctl restart sluice.service with {moved} at weight 0 in the file "
                    f"(pid {old['MainPID']} -> {new['MainPID']}, {took:.1f}s): SIGTERM to READY=1 "
                    f"{gap:.1f}s (stop {stopping:.1f}s, start {starting:.1f}s)", out)
        on_moved = ready.count(moved)
        self.expect(res["failures"] == [0] * k
                    and all(seen == [first] for seen, first in zip(res["backends"], ready)),
                    f"{k} keep-alive connections held across the restart each saw one backend "
                    f"and 0 failures ({on_moved} on {moved}, which the new table gives no flow; "
                    f"{res['requests']} requests, longest {res['max_stall']}s)", json.dumps(res))
        stop_log = self.journal_of(old["InvocationID"])
        m = re.search(r"conntrack hand-off /run/sluice/conntrack\.handoff: (\d+) connection\(s\) "
                      r"written for the next start \((\d+) bytes, (\d+) ms\)", stop_log)
        self.expect(m is not None and int(m.group(1)) >= k,
                    f"the stop wrote the hand-off file: {m.group(0) if m else ''}",
                    stop_log[-1500:])
        start_log = self.journal_of(new["InvocationID"])
        m = re.search(r"conntrack hand-off /run/sluice/conntrack\.handoff: (\d+) of (\d+) "
                      r"connection\(s\) taken from sluice \S+ \((\d+) ms before this start[;)]"
                      r".*", start_log)
        taken = int(m.group(1)) if m else 0
        rc_file, _ = self.vm("test -e /run/sluice/conntrack.handoff", check=False)
        self.expect(m is not None and taken >= k and rc_file != 0
                    and "each in the shard the NIC's RSS sends it to" in m.group(0),
                    f"the new start took it, placed each connection where the NIC's RSS "
                    f"(modelled) sends it, and removed it: {m.group(0) if m else ''}",
                    start_log[-1500:])
        metrics = self.metrics()
        metric_taken = metrics.get('sluice_handoff_connections{outcome="taken"}')
        metric_gap = metrics.get("sluice_handoff_gap_seconds")
        self.expect(metric_taken == taken and metric_gap is not None,
                    f"/metrics: sluice_handoff_connections{{outcome=\"taken\"}} {metric_taken}, "
                    f"sluice_handoff_gap_seconds {metric_gap}",
                    f"taken {metric_taken} gap {metric_gap}")
        res = self.spread(10)
        self.expect(res["failures"] == 0 and set(res["counts"]) == {other},
                    f"new connections go to {other} only: the table did move ({res['counts']})",
                    json.dumps(res))

        # Without the file: stop and start.
        held, ready = self.hold(k)
        entry = f'{{ address = "{ip_of[other]}" }}'
        self.write_config(good.replace(entry, f'{{ address = "{ip_of[other]}", weight = 0 }}'))
        old = self.unit_show("InvocationID")
        self.vm("systemctl stop sluice.service", timeout=180)
        rc_dir, _ = self.vm("test -e /run/sluice", check=False)
        self.vm("systemctl start sluice.service", timeout=180)
        new = self.unit_show("InvocationID")
        _, stopping, starting = self.gap()
        res = self.release(held)
        stop_log = self.journal_of(old["InvocationID"])
        start_log = self.journal_of(new["InvocationID"])
        reset = sum(1 for f in res["failures"] if f > 0)
        after = sorted({seen[-1] for seen in res["backends"]})
        self.expect(ready == [other] * k and "written for the next start" in stop_log
                    and rc_dir != 0 and "hand-off" not in start_log and reset == k,
                    f"systemctl stop + start with {other} at weight 0 in the file: the stop wrote "
                    f"the file, systemd removed /run/sluice with it, the start took none, and "
                    f"{reset} of {k} held connections on {other} were reset (reconnected to "
                    f"{', '.join(after)}); stop {stopping:.1f}s, start {starting:.1f}s",
                    f"ready {ready} dir kept {rc_dir == 0} {json.dumps(res)} "
                    f"stop: {stop_log[-600:]} start: {start_log[-600:]}")
        print(f"boot-traffic: hand-off checks took {time.monotonic() - t0:.0f}s", flush=True)

    def drain_outlasts_the_stop_timeout(self, good):
        """With [bgp], `systemctl stop` withdraws the VIPs and forwards for
        drain_time before sluice stops; sluice extends systemd's stop
        timeout (EXTEND_TIMEOUT_USEC) by drain_time + 30 s, so a drain
        longer than TimeoutStopSec (5 s in a drop-in here) ends in a clean
        exit, not in SIGKILL. Stops the service: the last check."""
        drain = 12
        self.vm("mkdir -p /etc/systemd/system/sluice.service.d && printf '[Service]\\n"
                "TimeoutStopSec=5s\\n' > /etc/systemd/system/sluice.service.d/stop.conf "
                "&& systemctl daemon-reload")
        self.write_config(good + f'\n[bgp]\nasn = 65001\nkernel_table = 100\n'
                          f'drain_time = "{drain}s"\n\n[[bgp.peer]]\nname = "tor"\n'
                          f'address = "10.99.0.1"\nasn = 65000\n')
        self.vm("systemctl restart sluice.service")
        time.sleep(2)  # the control loop's first announcement decision
        t = time.monotonic()
        rc, out = self.vm("systemctl stop sluice.service", check=False, timeout=120)
        took = time.monotonic() - t
        _, result = self.vm("systemctl show -p Result -p ExecMainCode -p ExecMainStatus "
                            "sluice.service")
        _, journal = self.vm("journalctl -u sluice.service -b --no-pager -o cat -n 30")
        self.expect(rc == 0 and drain <= took < drain + 20
                    and "Result=success" in result and "ExecMainStatus=0" in result
                    and "sluice: drained, stopping" in journal,
                    f"systemctl stop with drain_time {drain}s and TimeoutStopSec=5s: drained, "
                    f"exited 0 after {took:.0f}s", f"{out} {result} {journal[-800:]}")

    def run(self):
        t0 = time.monotonic()
        self.build()
        good = open(CONFIG, encoding="utf-8").read()
        ips = set(BACKENDS.values())

        # HC-*: probes leave the VM through sluice's TAP and the data NIC.
        self.wait_healthy(ips, timeout=120)
        self.ok(f"both backends healthy by HTTP health checks through the data NIC "
                f"({time.monotonic() - t0:.0f}s after the network came up)")

        r = self.run_in("c", "ping", "-c", "3", "-W", "5", APPLIANCE, check=False, timeout=60)
        m = re.search(r"(\d+) received", r.stdout)
        self.expect(m is not None and int(m.group(1)) == 3,
                    f"the appliance's address {APPLIANCE} answers ping on VLAN {VLAN}",
                    r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr)

        before = self.metrics()
        t = time.monotonic()
        res = self.spread(40)
        took = time.monotonic() - t
        self.expect(res["failures"] == 0 and set(res["counts"]) == set(BACKENDS),
                    f"40 new connections to the VIP, no failure, served by b1 and b2 "
                    f"({res['counts']}, {took:.1f}s)", json.dumps(res))

        after = self.metrics()
        key_rx = 'sluice_port_rx_packets_total{port="data0"}'
        key_tx = 'sluice_port_tx_packets_total{port="data0"}'
        rx = after.get(key_rx, 0) - before.get(key_rx, 0)
        tx = after.get(key_tx, 0) - before.get(key_tx, 0)
        # Each connection: at least SYN, ACK+request, ACK, FIN, ACK from the
        # client, all forwarded.
        self.expect(rx >= 40 * 4 and tx >= 40 * 4,
                    f"/metrics from the host counts the traffic on data0 (+{rx:.0f} rx, +{tx:.0f} tx)",
                    f"rx +{rx} tx +{tx}")

        self.unit_sandbox()
        self.one_client_on_every_worker()

        # A good reload: b2 leaves the service.
        b1_only = good.replace('  { address = "10.99.0.12" },\n', "")
        assert b1_only != good
        self.write_config(b1_only)
        rc, out = self.vm("systemctl reload sluice.service", check=False)
        self.expect(rc == 0, "systemctl reload with a good configuration (b1 only) succeeds", out)
        res = self.spread(20)
        self.expect(res["failures"] == 0 and set(res["counts"]) == {"b1"},
                    f"after it, new connections go to b1 only ({res['counts']})", json.dumps(res))

        # A bad reload: refused with its diagnostics, the running one stays.
        bad = b1_only.replace('conntrack_capacity = 65536', 'conntrack_capacity = "lots"')
        assert bad != b1_only
        self.write_config(bad)
        rc, out = self.vm("systemctl reload sluice.service", check=False)
        self.expect(rc != 0, "systemctl reload with a bad configuration fails", out)
        _, journal = self.vm("journalctl -u sluice.service -b --no-pager -o cat -n 40")
        refusal = next((line for line in journal.splitlines()
                        if "/etc/sluice/sluice.toml:" in line and "conntrack_capacity" in line), "")
        self.expect(refusal != "",
                    f"the journal has the refusal's diagnostics: {refusal.strip()!r}",
                    journal[-1500:])
        _, system_log = self.vm("journalctl -b --no-pager -o cat -n 300")
        self.expect(re.search(r"Reload failed for .*sluice", system_log) is not None,
                    "systemd logs \"Reload failed\" for the unit")
        _, state = self.vm("systemctl is-active sluice.service", check=False)
        self.expect(state.strip() == "active", "sluice.service is still active", state)
        res = self.spread(20)
        self.expect(res["failures"] == 0 and set(res["counts"]) == {"b1"},
                    f"the running configuration stays: b1 only ({res['counts']})", json.dumps(res))

        # Back to both backends, then kill -9.
        self.write_config(good)
        self.vm("systemctl reload sluice.service")
        self.wait_healthy(ips, timeout=60)
        res = self.spread(20)
        self.expect(res["failures"] == 0 and set(res["counts"]) == set(BACKENDS),
                    f"reloaded with both backends again ({res['counts']})", json.dumps(res))

        old_pid = self.main_pid()
        _, restarts0 = self.vm("systemctl show -p NRestarts --value sluice.service")
        self.vm("touch /run/sluice/kept-by-restart")
        t_kill = time.monotonic()
        self.vm(f"kill -9 {old_pid}")
        deadline = t_kill + 180
        new_pid, state = 0, ""
        while time.monotonic() < deadline:
            _, state = self.vm("systemctl is-active sluice.service", check=False)
            new_pid = self.main_pid()
            if state.strip() == "active" and new_pid not in (0, old_pid):
                break
            time.sleep(1)
        t_active = time.monotonic() - t_kill
        _, restarts1 = self.vm("systemctl show -p NRestarts --value sluice.service")
        self.expect(state.strip() == "active" and new_pid not in (0, old_pid)
                    and int(restarts1) == int(restarts0) + 1,
                    f"kill -9 of sluice (pid {old_pid}): systemd restarted it (pid {new_pid}, "
                    f"NRestarts {restarts0.strip()} -> {restarts1.strip()}), active again "
                    f"{t_active:.0f}s after the kill",
                    f"state {state.strip()} pid {new_pid} restarts {restarts1.strip()}")
        rc_kept, _ = self.vm("test -e /run/sluice/kept-by-restart", check=False)
        rc_file, _ = self.vm("test -e /run/sluice/conntrack.handoff", check=False)
        self.expect(rc_kept == 0 and rc_file != 0,
                    "the restart by systemd kept /run/sluice (RuntimeDirectoryPreserve=restart); "
                    "kill -9 left no hand-off file",
                    f"marker kept {rc_kept == 0}, hand-off file there {rc_file == 0}")
        self.vm("rm -f /run/sluice/kept-by-restart")
        self.wait_healthy(ips, timeout=120)
        res = self.spread(20)
        t_flow = time.monotonic() - t_kill
        self.expect(res["failures"] == 0 and set(res["counts"]) == set(BACKENDS),
                    f"after the restart new connections flow to b1 and b2 ({res['counts']}; "
                    f"{t_flow:.0f}s after the kill)", json.dumps(res))
        time.sleep(1.5)  # the switch writes its counters every second
        sw = self.switch_counters()
        self.expect(self.switch.poll() is None and sw["trunk_to_access"] > 0
                    and sw["trunk_untagged"] == 0 and sw["trunk_other_vlan"] == 0,
                    f"every frame from the VM's data NIC carried VLAN {VLAN} "
                    f"({sw['trunk_to_access']} tagged, {sw['trunk_untagged']} untagged, "
                    f"{sw['trunk_other_vlan']} other VLAN; {sw['access_to_trunk']} tagged towards it)",
                    json.dumps(sw))
        self.handoff_across_restart(good)
        self.drain_outlasts_the_stop_timeout(good)
        print(f"boot-traffic: {self.passed} passed, 0 failed "
              f"({time.monotonic() - t0:.0f}s)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tap", required=True)
    ap.add_argument("--ssh-port", type=int, required=True)
    ap.add_argument("--ssh-key", required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    args = ap.parse_args()
    t = BootTraffic(args)
    try:
        t.run()
    except (CheckFailed, RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"boot-traffic: FAIL: {e}", file=sys.stderr, flush=True)
        try:
            _, journal = t.vm("journalctl -u sluice.service -b --no-pager -n 40", check=False,
                              timeout=60)
            print("--- sluice's journal in the VM ---\n" + journal, file=sys.stderr)
        except (subprocess.TimeoutExpired, OSError):
            pass
        print(f"boot-traffic: {t.passed} passed, 1 failed", flush=True)
        sys.exit(1)
    finally:
        t.close()


if __name__ == "__main__":
    main()
