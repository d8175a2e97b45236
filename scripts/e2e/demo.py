#!/usr/bin/env python3
"""The live demo (scripts/demo.sh): a real network in namespaces, sluice on
DPDK (net_af_packet) in front of three real HTTP backends, a client opening
connections to the VIP. Shows the spread live, a backend failing and coming
back, a reload adding a fourth backend, and a slice of /metrics. Cleans up
on exit or Ctrl-C."""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lab import APPLIANCE, CLIENT, VIP, Lab  # noqa: E402

BAR = 40


def show(line, label):
    counts, failures = line["counts"], line["failures"]
    total = sum(counts.values()) or 1
    cells = []
    for b in ("b1", "b2", "b3", "b4"):
        n = counts.get(b, 0)
        cells.append(f"{b} {n:4d} {'#' * round(8 * n / total):<8}")
    print(f"  {label:<28} {' '.join(cells)}  failed {failures}", flush=True)


def watch(stream, seconds, label):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        raw = stream.stdout.readline()
        if not raw:
            return
        show(json.loads(raw), label)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", help="binary (default target/debug/sluice)")
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("demo: needs root (network namespaces)")
    lab = Lab(workers=a.workers, sluice=a.sluice)
    print("== building the network: client, sluice (DPDK net_af_packet + TAP), 3 backends")
    lab.build()
    for i in (1, 2, 3, 4):
        lab.start_backend(i)
    lab.write_config([1, 2, 3])
    lab.start_sluice()
    print(f"   client {CLIENT} -> VIP {VIP} via appliance {APPLIANCE}; "
          f"backends {', '.join(lab.backend_ip(i) for i in (1, 2, 3))} answer directly (DSR)")
    while set(lab.backend_states().values()) != {"healthy"}:
        time.sleep(0.2)
    print("== sluice status\n" + "\n".join("   " + line for line in lab.status().splitlines()))
    stream = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns("c"), sys.executable,
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "client.py"), "stream", "40"],
        stdout=subprocess.PIPE, text=True)
    try:
        print("== new connections per second, by backend")
        watch(stream, 4, "steady state")
        print("== b2's HTTP server stops. New connections sent to it fail (its kernel refuses\n"
              "   them) until the health check marks it down: 1 s interval, 0.5 s timeout,\n"
              "   2 failures = a 2 s window (HC-4); then they avoid it")
        lab.stop_backend(2)
        watch(stream, 4, "b2 down")
        print("   status: " + ", ".join(f"{k} {v}" for k, v in lab.backend_states().items()))
        print("== b2 comes back (2 successful checks, HC-5)")
        lab.start_backend(2)
        watch(stream, 4, "b2 back")
        print("== reload: add b4 (sluice reload; established connections keep their backend)")
        lab.write_config([1, 2, 3, 4])
        print("   " + lab.reload().stdout.strip())
        watch(stream, 5, "after reload")
    finally:
        stream.terminate()
    print("== ping the appliance (answered by the kernel through the TAP)")
    print("   " + lab.run_in("c", "ping", "-c", "2", "-i", "0.2", APPLIANCE, check=False)
          .strip().splitlines()[-2])
    print("== a slice of /metrics")
    for k, v in sorted(lab.metrics().items()):
        wanted = ("port_rx", "port_tx_p", "punted", "injected", "dropped", "backend_packets",
                  "conntrack_entries", "backend_healthy{", "reloads")
        if v and any(s in k for s in wanted) and not any(
                s in k for s in ('service="udp"', 'service="web6"')):
            print(f"   {k} {int(v) if v == int(v) else v}")
    rc = lab.stop_sluice()
    print(f"== sluice stopped (exit {rc}); cleaning up")
    lab.close()


if __name__ == "__main__":
    main()
