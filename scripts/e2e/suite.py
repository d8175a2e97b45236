#!/usr/bin/env python3
"""The live end-to-end suite: the appliance on a network. Real
kernel clients and HTTP/UDP servers in network namespaces, sluice on
net_af_packet over a veth with its exception path on a TAP (AP-4), layer-2
DSR. Run as root:  scripts/e2e/suite.py --workers 1   (and 2)

Cases (numbered as the suite prints them):
  6  ARP for and ping to the appliance's address are answered by the
     kernel through the TAP (AP-4), and the same over IPv6 (neighbour
     discovery, ping6, TCP to an IPv6 VIP); health probes come from the
     appliance's address (HC-8)
  1  many TCP connections spread over the three backends (MG-1; shares)
  3  a backend's health check fails: marked down within the HC-4 window,
     new connections avoid it (EL-1), its established connection stays
     (CT-8, DEFAULT_FOR_PROTOCOL persists TCP); it comes back (HC-5);
     its server stopped and restarted: same
  2/4 reload adds a fourth backend while keep-alive connections loop
     requests: zero failures, every connection keeps its backend (CT-7,
     AP-5); new connections reach the new backend once it is healthy
  5  UDP datagrams larger than the MTU under CLIENT_IP affinity arrive
     whole at one backend (HA-2, CT-3)
Accounting: RX + extra fragments = TX + punted + drops on the port, and
no drop outside the expected reasons.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, failures, wait_for  # noqa: E402
from lab import APPLIANCE, APPLIANCE6, GATEWAY, REMOTE_BACKEND, Lab  # noqa: E402

# HC-4 with the suite's check: timeout 0.5 s × 2 + interval 1 s × 1.
FAIL_WINDOW = 0.5 * 2 + 1.0 * 1
# Success window: response time × 2 + interval × 1 (responses are ~ms).
SUCCESS_WINDOW = 1.0 * 1
# Slack for probe jitter (HC-3 spreads probes) and the status poll.
SLACK = 1.5

report = []


def case_exception_path(lab):
    print("case 6: ARP and ping to the appliance through the TAP (AP-4)")
    r = lab.run_in("c", "ping", "-c", "3", "-i", "0.2", "-W", "1", APPLIANCE, check=False)
    check(" 0% packet loss" in r, "ping 10.99.0.2: 3/3 answered")
    check("DUP" not in r, "no duplicate answers (the kernel answers only via the TAP)")
    neigh = lab.run_in("c", "ip", "neigh", "show", APPLIANCE)
    mac = lab.run_in("lb", "cat", "/sys/class/net/lb0/address").strip()
    check(mac in neigh, f"client's ARP entry for {APPLIANCE} is the port's MAC {mac}")


def case_ipv6(lab):
    print("case 6 (IPv6): neighbour discovery and ping6 through the TAP; a TCP VIP over IPv6 "
          "with IPv6 backends resolved by ND")
    r = lab.run_in("c", "ping", "-6", "-c", "3", "-i", "0.2", "-W", "1", APPLIANCE6, check=False)
    check(" 0% packet loss" in r and "DUP" not in r, f"ping {APPLIANCE6}: 3/3 answered, once")
    neigh = lab.run_in("c", "ip", "-6", "neigh", "show", APPLIANCE6)
    mac = lab.run_in("lb", "cat", "/sys/class/net/lb0/address").strip()
    check(mac in neigh, f"client's ND entry for {APPLIANCE6} is the port's MAC {mac}")
    ready = wait_for(lambda: set(lab.backend_states("web6").values()) == {"healthy"}, 10)
    check(ready is not None, f"IPv6 backends healthy (HTTP checks over IPv6), took {ready}")
    # Their next hops come from neighbour discovery through the TAP.
    lines = lab.backend_lines("web6")
    for i in (1, 2, 3):
        mac = lab.run_in(f"b{i}", "cat", "/sys/class/net/eth0/address").strip()
        f = lines.get(f"fd99::{10 + i}", [])
        hop = f[f.index("next-hop") + 1] if "next-hop" in f else None
        check(hop == mac, f"fd99::{10 + i}: next hop {hop} is b{i}'s MAC {mac} (ND via the TAP)")
    r = lab.client("spread6", 120)
    report.append(f"IPv6 VIP: {r['counts']} over 120 connections (failures {r['failures']})")
    check(r["failures"] == 0 and len(r["counts"]) == 3,
          f"120 IPv6 connections, all answered, over all three backends: {r['counts']}")


def case_gateway(lab):
    print("routes: the port's gateway is installed on the TAP; an off-subnet backend's "
          "next hop is the gateway's MAC")
    routes = lab.run_in("lb", "ip", "route", "show", "default")
    check(f"default via {GATEWAY} dev sl-up" in routes, f"default route: {routes.strip()}")
    mac = lab.run_in("b4", "cat", "/sys/class/net/eth0/address").strip()

    def hop():
        f = lab.backend_lines("remote").get(REMOTE_BACKEND, [])
        return f[f.index("next-hop") + 1] if "next-hop" in f else None

    t = wait_for(lambda: hop() == mac, 5)
    check(t is not None, f"{REMOTE_BACKEND}: next hop {hop()} is the gateway's MAC {mac}")


def case_probe_source(lab):
    print("HC-8: health checks come from the appliance's own address")
    peers = set()
    for i in (1, 2, 3):
        path = os.path.join(lab.state, f"b{i}.health-peers")
        if os.path.exists(path):
            with open(path) as f:
                peers |= {line.strip() for line in f if line.strip()}
    # IPv4 backends are probed from the IPv4 address, IPv6 ones from the IPv6.
    want = {APPLIANCE, APPLIANCE6}
    check(peers == want, f"probe sources {sorted(peers)} == {sorted(want)}")


def case_spread(lab, n):
    print(f"case 1: {n} TCP connections from as many client ports")
    r = lab.client("spread", n)
    counts = r["counts"]
    shares = {b: round(100 * c / n, 1) for b, c in sorted(counts.items())}
    report.append(f"shares over {n} connections: {shares} (failures {r['failures']})")
    print(f"  shares: {shares}")
    check(r["failures"] == 0, "no failed connection")
    check(set(counts) == {"b1", "b2", "b3"}, "all three backends used")
    check(all(20 <= s <= 47 for s in shares.values()), "each share within 20–47 %")


def detect(lab, ip, state, timeout):
    return wait_for(lambda: lab.backend_states().get(ip) == state, timeout)


def case_health(lab):
    print("case 3: a failing health check (HC-4, EL-1, CT-8, HC-5)")
    b2 = lab.backend_ip(2)
    # An established connection on b2 to watch through the failure.
    hold = lab.client_background("hold", 12, 12)
    time.sleep(1.0)
    lab.set_health(2, False)
    t = detect(lab, b2, "unhealthy", FAIL_WINDOW + 1.0 + SLACK)
    report.append(f"health failure detected in {t if t is None else round(t, 2)} s "
                  f"(HC-4 window {FAIL_WINDOW} s + one interval of probe phase)")
    check(t is not None, f"b2 unhealthy within {FAIL_WINDOW + 1.0 + SLACK} s (took {t})")
    r = lab.client("spread", 60)
    check(r["failures"] == 0 and "b2" not in r["counts"],
          f"new connections avoid b2: {r['counts']}")
    lab.set_health(2, True)
    t = detect(lab, b2, "healthy", SUCCESS_WINDOW + 1.0 + SLACK)
    report.append(f"recovery detected in {t if t is None else round(t, 2)} s "
                  f"(success window {SUCCESS_WINDOW} s + one interval)")
    check(t is not None, f"b2 healthy again within {SUCCESS_WINDOW + 1.0 + SLACK} s (took {t})")
    h = lab.collect(hold)
    on_b2 = [i for i, seen in enumerate(h["backends"]) if seen and seen[0] == "b2"]
    check(bool(on_b2), f"some held connection is on b2 (connections: {h['backends']})")
    check(all(h["backends"][i] == ["b2"] for i in on_b2) and sum(h["failures"]) == 0,
          f"connections on b2 kept b2 with 0 failures while it was unhealthy (CT-8); "
          f"failures {h['failures']}, {h['requests']} requests")
    r = lab.client("spread", 60)
    check("b2" in r["counts"], f"new connections reach b2 again: {r['counts']}")

    print("case 3b: b2's server stopped, then restarted")
    lab.stop_backend(2)
    t = detect(lab, b2, "unhealthy", FAIL_WINDOW + 1.0 + SLACK)
    report.append(f"stopped server detected in {t if t is None else round(t, 2)} s")
    check(t is not None, f"stopped b2 marked unhealthy (took {t})")
    r = lab.client("spread", 60)
    check(r["failures"] == 0 and "b2" not in r["counts"], f"no failures, b2 avoided: {r}")
    lab.start_backend(2)
    t = detect(lab, b2, "healthy", SUCCESS_WINDOW + 1.0 + SLACK)
    check(t is not None, f"restarted b2 healthy again (took {t})")


def case_reload(lab):
    print("cases 2 and 4: reload adds b4 under keep-alive traffic (CT-7, AP-5)")
    hold = lab.client_background("hold", 8, 16)
    time.sleep(1.5)
    lab.write_config([1, 2, 3, 4])
    r = lab.reload()
    check(r.returncode == 0, f"sluice reload: {r.stdout.strip()} {r.stderr.strip()}")
    b4 = lab.backend_ip(4)
    t = detect(lab, b4, "healthy", SUCCESS_WINDOW + 1.0 + SLACK)
    check(t is not None, f"b4 proves itself healthy after the reload (took {t})")
    r = lab.client("spread", 120)
    check(r["failures"] == 0 and "b4" in r["counts"], f"new connections reach b4: {r['counts']}")
    h = lab.collect(hold)
    report.append(f"reload under traffic: {sum(h['failures'])} failed of {h['requests']} "
                  f"requests on {len(h['backends'])} keep-alive connections")
    check(sum(h["failures"]) == 0, f"zero failed requests during the reload ({h['requests']} sent)")
    check(all(len(seen) == 1 for seen in h["backends"]),
          f"every established connection kept its backend: {h['backends']}")


def case_udp_fragments(lab):
    print("case 5: UDP datagrams beyond the MTU, CLIENT_IP affinity (HA-2)")
    size = 1800
    r = lab.client("udp", size, 40)
    check(r["lost"] == 0, f"40/40 datagrams answered ({r})")
    check(len(r["counts"]) == 1, f"all at one backend: {r['counts']}")
    check(r["lengths"] == [size], f"each arrived whole ({size} bytes): {r['lengths']}")


def case_udp_follow_flow(lab):
    print('case 7: fragments = "follow_flow": large datagrams go with their flow')
    lab.write_config([1, 2, 3, 4], udp_balance='fragments = "follow_flow"')
    r = lab.reload()
    check(r.returncode == 0, "reload to NONE affinity with fragments = follow_flow")
    out = lab.client("udp-flows", 1800, 40)
    flows = out["flows"]
    same = sum(1 for small, large in flows if small == large)
    backends = {small for small, _ in flows}
    report.append(f"follow_flow: {same}/{len(flows)} flows' fragmented datagrams at their "
                  f"unfragmented ones' backend, over {sorted(backends)}; lost {out['lost']}")
    check(out["lost"] == 0 and len(flows) == 40, f"40 flows answered twice ({out['lost']} lost)")
    check(same == len(flows), f"every flow's fragments followed it: {same}/{len(flows)}")
    check(len(backends) > 1, f"the flows spread over backends: {sorted(backends)}")
    m = lab.metrics(quiet=True)
    unplaced = m.get('sluice_dropped_packets_total{reason="fragment_unplaced"}', 0)
    check(unplaced == 0, f"no fragment left unplaced: {unplaced}")


def case_accounting(lab):
    print("accounting: RX + extra fragments = TX + punted + drops")
    m = lab.metrics()
    rx = m.get('sluice_port_rx_packets_total{port="uplink"}', 0)
    tx = m.get('sluice_port_tx_packets_total{port="uplink"}', 0)
    punted = m.get('sluice_port_punted_packets_total{port="uplink"}', 0)
    drops = {k: v for k, v in m.items() if k.startswith("sluice_dropped_packets_total") and v}
    # Fragmentation (AP-3) turns one received packet into several sent.
    extra = (m.get("sluice_fragments_created_total", 0)
             - m.get("sluice_fragmented_packets_total", 0))
    report.append(f"port: rx {int(rx)} tx {int(tx)} punted {int(punted)} drops {drops} "
                  f"extra fragments {int(extra)}")
    check(rx > 0 and rx + extra == tx + punted + sum(drops.values()),
          f"rx {rx} + extra fragments {extra} = tx {tx} + punted {punted} "
          f"+ drops {sum(drops.values())}")
    # Receive loss before sluice sees a frame: the kernel's drops on the
    # af_packet sockets (ring full), exported since DPDK does not count them.
    kernel = m.get('sluice_port_kernel_drops_total{port="uplink"}')
    report.append(f"af_packet kernel drops: {kernel}")
    check(kernel is not None, f"the kernel's af_packet drops are exported: {kernel}")
    if lab.workers > 1:
        backpressure = m.get("sluice_steering_backpressure_total", 0)
        report.append(f"RX polls held back by a full steering ring: {int(backpressure)}")
        check(m.get('sluice_dropped_packets_total{reason="steering_ring_full"}', 0) == 0,
              "no packet dropped between workers (steering backpressure)")
        out = m.get('sluice_steered_packets_total{direction="out"}', 0)
        inn = m.get('sluice_steered_packets_total{direction="in"}', 0)
        report.append(f"steered between workers: out {int(out)} in {int(inn)}")
        check(out > 0 and out == inn, f"software steering moved packets: out {out} = in {inn}")
        # AP-1: the one client address's connections are owned by their
        # 5-tuples, so every worker holds a share of them.
        entries = [m.get(f'sluice_conntrack_entries{{worker="{w}"}}', 0)
                   for w in range(lab.workers)]
        mean = sum(entries) / len(entries)
        report.append(f"conntrack entries per worker (one client address): {entries}")
        check(mean > 0 and all(abs(e - mean) <= 0.15 * mean for e in entries),
              f"one client address's connections spread over the workers within ±15 %: {entries}")
    resolved = {k: v for k, v in m.items() if k.startswith("sluice_backend_next_hop_resolved")}
    check(len(resolved) >= 8 and all(v == 1 for v in resolved.values()),
          f"every backend's next hop resolved through the kernel ({len(resolved)} gauges)")
    injected = m.get('sluice_port_injected_packets_total{port="uplink"}', 0)
    check(injected > 0, f"the kernel's packets went out through the TAP: {int(injected)}")
    # IPv6/multicast chatter from the switch side is not for us; nothing
    # else may be dropped.
    allowed = ("not_for_us", "unknown_ethertype")
    bad = {k: v for k, v in drops.items() if not any(a in k for a in allowed)}
    check(not bad, f"no unexpected drops: {bad}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--sluice", help="binary (default target/debug/sluice)")
    ap.add_argument("--connections", type=int, default=600)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("e2e: needs root (network namespaces)")
    lab = Lab(workers=a.workers, sluice=a.sluice)
    started = time.monotonic()
    try:
        lab.build()
        for i in (1, 2, 3, 4):
            lab.start_backend(i)
        lab.write_config([1, 2, 3])
        lab.start_sluice()
        # Backends start UNHEALTHY (initial_state) and prove themselves.
        ready = wait_for(lambda: set(lab.backend_states().values()) == {"healthy"}, 10)
        check(ready is not None, f"all backends healthy after start (took {ready})")
        case_exception_path(lab)
        case_ipv6(lab)
        case_gateway(lab)
        case_probe_source(lab)
        case_spread(lab, a.connections)
        case_health(lab)
        case_reload(lab)
        case_udp_fragments(lab)
        case_udp_follow_flow(lab)
        case_accounting(lab)
        rc = lab.stop_sluice()
        check(rc == 0, f"sluice stopped cleanly (exit {rc})")
    except Exception as e:  # noqa: BLE001 — reported as a failure below
        failures.append(f"suite error: {e}")
        print(f"  FAIL {e}")
    finally:
        if failures and lab.sluice is not None:
            print("--- sluice log ---\n" + lab.sluice_output()[-4000:])
        lab.close()
    print(f"e2e ({a.workers} worker(s), {time.monotonic() - started:.0f} s):")
    for line in report:
        print(f"  {line}")
    if failures:
        print(f"e2e: {len(failures)} failure(s)")
        for f in failures:
            print(f"  - {f}")
        sys.exit(1)
    print("e2e: all passed")


if __name__ == "__main__":
    main()
