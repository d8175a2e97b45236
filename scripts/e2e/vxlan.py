#!/usr/bin/env python3
"""The live VXLAN test: sluice delivers the lab's web VIPs (IPv4 and IPv6)
to real Linux backends through VXLAN (AP-3, RFC 7348), each backend
decapsulating on a kernel `vxlan` device and answering the client directly.
Run as root:

    scripts/e2e/vxlan.py [--sluice target/debug/sluice]

The lab of lab.py (namespaces, sluice on net_af_packet, classic HTTP
health checks through the TAP); the `web` service is VXLAN with VNI 42
over IPv4, `web6` VXLAN with VNI 43 over IPv6, both to the device MAC
`vxlan_mac`. Each backend has two devices, `vx4` (local: its IPv4
address) and `vx6` (its IPv6 address), created with that MAC — except
b3's, created with another one:

  1. b1 and b2 serve: new connections to both VIPs reach them through
     their vxlan devices (the devices' receive counters grow, the
     backends' eth0 never sees the VIP); b3, healthy by the classic check
     since its address answers, drops every frame not addressed to its
     device (a Linux host takes only frames to its own MAC), so its share
     of new connections fails: the inner destination MAC is what the
     backend checks.
  2. b3's devices get the right MAC: every connection succeeds, over all
     three backends, on both VIPs.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, failures, wait_for  # noqa: E402
from lab import SUBNET6, run_test  # noqa: E402

PREFIX = "slx"
VXLAN_MAC = "02:5c:00:00:00:2a"
WRONG_MAC = "02:5c:00:00:00:ff"
VNI4, VNI6 = 42, 43
DELIVERY = (
    f'encapsulation = "vxlan"\nvxlan_vni = {VNI4}\nvxlan_mac = "{VXLAN_MAC}"',
    f'encapsulation = "vxlan"\nvxlan_vni = {VNI6}\nvxlan_mac = "{VXLAN_MAC}"',
)
BACKENDS = (1, 2, 3)
CONNECTIONS = 60

report = []


def add_vxlan_devices(lab, i, mac):
    """`vx4` and `vx6` on backend i: the service's VNIs on the IANA port,
    bound to its own addresses, with `mac`; no reverse-path filter on
    them (the answers leave by eth0, DSR)."""
    b = f"b{i}"
    lab._sysctl(b, "net.ipv4.conf.default.rp_filter=0")
    for dev, vni, local in (("vx4", VNI4, lab.backend_ip(i)),
                            ("vx6", VNI6, f"{SUBNET6}{10 + i}")):
        lab.run_in(b, "ip", "link", "add", dev, "address", mac, "type", "vxlan", "id",
                   str(vni), "dstport", "4789", "local", local, "nolearning")
        lab.run_in(b, "ip", "link", "set", dev, "up")


def rx_packets(lab, i, dev):
    out = lab.run_in(f"b{i}", "cat", f"/sys/class/net/{dev}/statistics/rx_packets")
    return int(out.strip())


def traffic(lab, what, timeout):
    """New connections to both VIPs, each given `timeout` seconds:
    {family: client.py's tally}."""
    r4 = lab.client("spread", CONNECTIONS, timeout)
    r6 = lab.client("spread6", CONNECTIONS, timeout)
    report.append(f"{what}: IPv4 {r4['counts']} failures {r4['failures']}; "
                  f"IPv6 {r6['counts']} failures {r6['failures']}")
    return {4: r4, 6: r6}


def run(lab):
    for i in BACKENDS:
        add_vxlan_devices(lab, i, WRONG_MAC if i == 3 else VXLAN_MAC)
        lab.start_backend(i)
    lab.write_config(BACKENDS, delivery=DELIVERY)
    lab.start_sluice()
    healthy = wait_for(lambda: set(lab.backend_states("web").values()) == {"healthy"}
                       and set(lab.backend_states("web6").values()) == {"healthy"}
                       and len(lab.backend_states("web")) == 3, 15, step=0.2)
    check(healthy is not None, "every backend healthy by the classic check (b3 included)")

    print("1. b3's vxlan devices have another MAC")
    before = {(i, d): rx_packets(lab, i, d) for i in BACKENDS for d in ("vx4", "vx6")}
    # A connection to b3 can only time out: half a second (the lab's
    # round trips are well under a millisecond).
    t = traffic(lab, "b3 with a wrong device MAC", 0.5)
    for fam in (4, 6):
        r = t[fam]
        check(set(r["counts"]) == {"b1", "b2"},
              f"IPv{fam}: answers from b1 and b2 only through VXLAN ({r['counts']})")
        check(r["failures"] >= CONNECTIONS // 10,
              f"IPv{fam}: b3's share fails ({r['failures']}/{CONNECTIONS}): "
              "frames to another MAC are not delivered")
    for i in (1, 2):
        for d in ("vx4", "vx6"):
            grew = rx_packets(lab, i, d) - before[(i, d)]
            check(grew > 0, f"b{i} {d} received {grew} packets")

    print("2. b3's devices take the service's vxlan_mac")
    for d in ("vx4", "vx6"):
        lab.run_in("b3", "ip", "link", "set", d, "address", VXLAN_MAC)
    t = traffic(lab, "every device MAC right", 2)
    for fam in (4, 6):
        r = t[fam]
        check(r["failures"] == 0 and set(r["counts"]) == {"b1", "b2", "b3"},
              f"IPv{fam}: {CONNECTIONS} connections over b1, b2, b3, none failed "
              f"({r['counts']}, failures {r['failures']})")
    m = lab.metrics(quiet=True)
    unsupported = sum(v for k, v in m.items()
                      if k.startswith("sluice_dropped_packets_total")
                      and 'reason="encap_unsupported"' in k)
    check(unsupported == 0, f"no encap_unsupported drops ({unsupported:.0f})")


def main():
    run_test("vxlan", PREFIX, run, report, failures)


if __name__ == "__main__":
    main()
