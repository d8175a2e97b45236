#!/usr/bin/env python3
"""The live test of health checks through the data path (`path = "data"`):
real Linux backends behind VXLAN, each misconfigured one way, each caught
by the data-path probe — with the reason that names it — while the direct
check (HC-8) of the same backends passes them. Run as root:

    scripts/e2e/data_path.py [--sluice target/debug/sluice]

The lab of lab.py, with a configuration of its own: `web` (TCP 80 on the
IPv4 VIP) and `web6` (the IPv6 VIP) over VXLAN with an HTTP check through
the data path; `dns` (UDP 5300 on the IPv4 VIP) over VXLAN with a UDP
check through the data path; `plain` (UDP 5000, layer 2) with the same
HTTP check, direct — the classic view of the same hosts.

Round 1:
  b1  configured right: healthy everywhere, carries the VIPs' traffic
  b2  its vxlan devices have another MAC than vxlan_mac  -> no_answer
  b3  the VIP not bound on its loopback                  -> no_answer
  b4  no vxlan device at all                             -> no_answer
Round 2, the hosts changed under the running sluice:
  b2  MAC set right                                      -> healthy
  b3  VIP bound again, but a strict reverse-path filter on the vxlan
      device: the appliance's address routes out eth0     -> no_answer
  b4  vxlan devices added: healthy for HTTP; its UDP server answers from
      its own address, not the VIP               -> answered_from_backend_address
  b2  also: its switch port's MTU 1400, below the tunnel's 1500 bytes
      (small packets pass: healthy)
and new connections to both VIPs reach only b1, b2, b4, none failing.

After each round `sluice doctor` names each broken path: round 1 b2
tunnel_mismatch (IPv6 drops it too), b3 vip_not_bound, b4 tunnel_refused
(its ICMP port unreachable for UDP 4789); round 2 b2 full_size_lost, b3
reverse_path_filter (IPv4 only: b3's IPv6 path works), b4's UDP
answers_from_backend_address; each with its hint, exit status 1.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vxlan  # noqa: E402
from checks import check, failures, wait_for  # noqa: E402
from lab import APPLIANCE, APPLIANCE6, GATEWAY, METRICS, SUBNET6, VIP, VIP6, run_test  # noqa: E402

PREFIX = "sld"
BACKENDS = (1, 2, 3, 4)
DNS_PORT = 5300
CONNECTIONS = 60
# A verdict needs 2 failures of a 1 s interval; slack for jitter.
VERDICT = 8

report = []


def config(lab):
    web = ", ".join(f'{{ address = "{lab.backend_ip(i)}" }}' for i in BACKENDS)
    web6 = ", ".join(f'{{ address = "{SUBNET6}{10 + i}" }}' for i in BACKENDS)
    dns = ", ".join(f'{{ address = "{lab.backend_ip(i)}" }}' for i in (1, 4))
    check = """type = "HTTP"
port = 80
request_path = "/health"
check_interval = "1s"
timeout = "500ms"
healthy_threshold = 2
unhealthy_threshold = 2"""
    vx4, vx6 = vxlan.DELIVERY
    return f"""# Written by scripts/e2e/data_path.py
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--log-level=error"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_af_packet0,iface=lb0"
address = "{APPLIANCE}/24"
address6 = "{APPLIANCE6}/64"
tap = "sl-up"
# The appliance's route to the VIPs' clients (and so to the VIPs, whose
# answers to the probes its kernel then takes).
gateway = "{GATEWAY}"

[metrics]
listen = "{METRICS}"

[[health_check]]
name = "http-data"
path = "data"
{check}

[[health_check]]
name = "http-direct"
{check}

[[health_check]]
name = "udp-data"
path = "data"
type = "UDP"
port = {DNS_PORT}
request = "ping"
check_interval = "1s"
timeout = "500ms"
healthy_threshold = 2
unhealthy_threshold = 2

[[backend_service]]
name = "web"
{vx4}
health_check = "http-data"
backend = [ {web} ]

[[backend_service]]
name = "web6"
{vx6}
health_check = "http-data"
backend = [ {web6} ]

[[backend_service]]
name = "dns"
{vx4}
health_check = "udp-data"
backend = [ {dns} ]

[[backend_service]]
name = "plain"
health_check = "http-direct"
backend = [ {web} ]

[[forwarding_rule]]
name = "web"
vip = "{VIP}"
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rule]]
name = "web6"
vip = "{VIP6}"
protocol = "TCP"
ports = "80"
backend_service = "web6"

[[forwarding_rule]]
name = "dns"
vip = "{VIP}"
protocol = "UDP"
ports = "{DNS_PORT}"
backend_service = "dns"

[[forwarding_rule]]
name = "plain"
vip = "{VIP}"
protocol = "UDP"
ports = "5000"
backend_service = "plain"
"""


def udp_responder(lab, i, bind):
    """A UDP server on backend i at `bind`:5300 answering `pong` to each
    datagram. Bound to the VIP it answers from the VIP; bound to 0.0.0.0
    the kernel picks its own address for the answer."""
    code = ("import socket\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.bind(({bind!r}, {DNS_PORT}))\n"
            "while True:\n"
            "    d, a = s.recvfrom(2048)\n"
            "    s.sendto(b'pong ' + d, a)\n")
    name = f"udp-b{i}"
    lab.procs[name] = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns(f"b{i}"), sys.executable, "-c", code],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def reasons(lab, service):
    """{backend: last-failure reason or None} from `sluice status`."""
    out = {}
    for ip, f in lab.backend_lines(service).items():
        out[ip] = f[f.index("last-failure") + 1] if "last-failure" in f else None
    return out


def name(lab, ip):
    for i in BACKENDS:
        if ip in (lab.backend_ip(i), f"{SUBNET6}{10 + i}"):
            return f"b{i}"
    return ip


def verdicts(lab, service):
    """{bN: "healthy" | the unhealthy backend's last failure}."""
    states = lab.backend_states(service)
    why = reasons(lab, service)
    return {name(lab, ip): ("healthy" if s == "healthy" else why.get(ip) or s)
            for ip, s in states.items()}


def expect(lab, want, what):
    """Waits until every service's verdicts are `want`'s, then checks."""
    def now():
        return {svc: verdicts(lab, svc) for svc in want}
    wait_for(lambda: now() == want, 3 * VERDICT, step=0.5)
    got = now()
    for svc, w in want.items():
        report.append(f"{what}, {svc}: {got[svc]}")
        check(got[svc] == w, f"{what}: {svc} {got[svc]} (want {w})")


def probe_failures(lab, backend, reason):
    m = lab.metrics(quiet=True)
    return sum(v for k, v in m.items()
               if k.startswith("sluice_backend_probe_failures_total")
               and f'backend="{backend}"' in k and f'reason="{reason}"' in k)


def doctor(lab, want, what):
    """Runs `sluice doctor` (JSON and text) and checks each path's problem
    against `want` ({(service, bN): problem or None}, services not named
    are not checked) and the text's hints against their fragments."""
    run = subprocess.run([lab.sluice_bin, "doctor", "--json", "--control-socket", lab.socket],
                         capture_output=True, text=True, timeout=240)
    try:
        rows = json.loads(run.stdout)["rows"]
    except (ValueError, KeyError) as e:
        check(False, f"{what}: doctor's JSON: {e}: {run.stdout[:300]} {run.stderr[:300]}")
        return ""
    got = {(r["service"], name(lab, r["backend"])): r["problem"] for r in rows}
    got = {k: v for k, v in got.items() if k[0] in {s for s, _ in want}}
    report.append(f"{what}, doctor: " + ", ".join(
        f"{s}/{b} {p or 'ok'}" for (s, b), p in sorted(got.items())))
    wrong = [r for r in rows if (r["service"], name(lab, r["backend"])) in want
             and want[(r["service"], name(lab, r["backend"]))] != r["problem"]]
    check(got == want, f"{what}: doctor names {got} (want {want}); wrong rows: {wrong}")
    failing = any(p is not None for p in want.values())
    check(run.returncode == (1 if failing else 0),
          f"{what}: doctor exits {run.returncode} (want {1 if failing else 0})")
    text = subprocess.run([lab.sluice_bin, "doctor", "--control-socket", lab.socket],
                          capture_output=True, text=True, timeout=240).stdout
    print(text)
    return text


def round_one(lab):
    print("round 1: one misconfiguration per backend")
    for i in BACKENDS:
        if i != 4:
            vxlan.add_vxlan_devices(lab, i, vxlan.WRONG_MAC if i == 2 else vxlan.VXLAN_MAC)
        lab.start_backend(i)
    lab.run_in("b3", "ip", "addr", "del", f"{VIP}/32", "dev", "lo")
    lab.run_in("b3", "ip", "addr", "del", f"{VIP6}/128", "dev", "lo")
    udp_responder(lab, 1, VIP)
    with open(lab.config, "w") as f:
        f.write(config(lab))
    lab.start_sluice()
    all_healthy = {f"b{i}": "healthy" for i in BACKENDS}
    broken = {"b1": "healthy", "b2": "no_answer", "b3": "no_answer", "b4": "no_answer"}
    # IPv6: b3, not holding the VIP, answers with an ICMPv6 unreachable.
    broken6 = {**broken, "b3": "unreachable"}
    expect(lab, {"web": broken, "web6": broken6,
                 "dns": {"b1": "healthy", "b4": "no_answer"},
                 "plain": all_healthy}, "round 1")
    m = lab.metrics(quiet=True)

    def path_up(svc, b, vip):
        return m.get(f'sluice_backend_data_path_healthy{{backend="{b}",service="{svc}",vip="{vip}"}}')
    up = (path_up("web", lab.backend_ip(1), VIP), path_up("web", lab.backend_ip(3), VIP),
          path_up("dns", lab.backend_ip(4), VIP))
    report.append(f"round 1, sluice_backend_data_path_healthy web b1, web b3, dns b4: {up}")
    check(up == (1, 0, 0), f"round 1: per-VIP data-path series {up} (want (1, 0, 0))")
    r = lab.client("spread", 20, 0.5)
    check(r["counts"] == {"b1": 20} and r["failures"] == 0,
          f"IPv4 VIP served by b1 alone: {r['counts']}, failures {r['failures']}")
    text = doctor(lab, {
        ("web", "b1"): None, ("web", "b2"): "tunnel_mismatch",
        ("web", "b3"): "vip_not_bound", ("web", "b4"): "tunnel_refused",
        ("web6", "b1"): None, ("web6", "b2"): "tunnel_mismatch",
        ("web6", "b3"): "vip_not_bound", ("web6", "b4"): "tunnel_refused",
        ("dns", "b1"): None, ("dns", "b4"): "tunnel_refused",
    }, "round 1")
    for fragment in (f"ip addr add {VIP}/32 dev lo", f"ip addr add {VIP6}/128 dev lo",
                     f"address {vxlan.VXLAN_MAC} type vxlan",
                     f"MAC {vxlan.VXLAN_MAC} (vxlan_mac"):
        check(fragment in text, f"round 1: doctor's hints say `{fragment}`")


def round_two(lab):
    print("round 2: the hosts changed under the running sluice")
    for d in ("vx4", "vx6"):
        lab.run_in("b2", "ip", "link", "set", d, "address", vxlan.VXLAN_MAC)
    lab.run_in("b3", "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
    lab.run_in("b3", "ip", "addr", "add", f"{VIP6}/128", "dev", "lo")
    lab._sysctl("b3", "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.vx4.rp_filter=1")
    # A link on the way to b2 (its switch port) below the tunnel's 1500
    # bytes, b2's own interface left at 1500: full-size packets die on
    # the way, small ones pass (the health checks', the clients').
    lab.run_in("sw", "ip", "link", "set", "p-b2", "mtu", "1400")
    vxlan.add_vxlan_devices(lab, 4, vxlan.VXLAN_MAC)
    udp_responder(lab, 4, "0.0.0.0")
    good = {"b1": "healthy", "b2": "healthy", "b4": "healthy"}
    expect(lab, {"web": {**good, "b3": "no_answer"},
                 # IPv6 has no reverse-path filter: b3 serves the IPv6 VIP.
                 "web6": {**good, "b3": "healthy"},
                 "dns": {"b1": "healthy", "b4": "answered_from_backend_address"}},
           "round 2")
    check(probe_failures(lab, lab.backend_ip(4), "answered_from_backend_address") > 0,
          "the failure counted by reason (sluice_backend_probe_failures_total)")
    r4 = lab.client("spread", CONNECTIONS)
    r6 = lab.client("spread6", CONNECTIONS)
    report.append(f"round 2 traffic: IPv4 {r4['counts']} failures {r4['failures']}; "
                  f"IPv6 {r6['counts']} failures {r6['failures']}")
    check(set(r4["counts"]) == {"b1", "b2", "b4"} and r4["failures"] == 0,
          f"IPv4: {CONNECTIONS} connections over b1, b2, b4 ({r4['counts']}), none failed")
    check(set(r6["counts"]) == {"b1", "b2", "b3", "b4"} and r6["failures"] == 0,
          f"IPv6: {CONNECTIONS} connections over all four ({r6['counts']}), none failed")
    text = doctor(lab, {
        ("web", "b1"): None, ("web", "b2"): "full_size_lost",
        ("web", "b3"): "reverse_path_filter", ("web", "b4"): None,
        ("web6", "b1"): None, ("web6", "b2"): "full_size_lost",
        ("web6", "b3"): None, ("web6", "b4"): None,
        ("dns", "b1"): None, ("dns", "b4"): "answers_from_backend_address",
    }, "round 2")
    for fragment in ("MTU", "Bind it to", "net.ipv4.conf.all.rp_filter=2"):
        check(fragment in text, f"round 2: doctor's hints say `{fragment}`")


def main():
    run_test("data_path", PREFIX, lambda lab: (round_one(lab), round_two(lab)), report, failures)


if __name__ == "__main__":
    main()
