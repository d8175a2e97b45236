#!/usr/bin/env python3
"""Client traffic for the live end-to-end suite and the demo (runs in the
client namespace). Every command prints one JSON object on stdout.

  spread N [T]        N requests, each on a new TCP connection (new port),
                      each given T seconds (default 2)
  spread6 N [T]       the same to the IPv6 VIP
  hold SECONDS K [--timeout S] [--pause-file PATH] [--sources A,B,...]
                      K keep-alive connections, each looping requests for
                      SECONDS; reports per connection the backends it saw
                      and its failures (a connection that fails reconnects,
                      and the failure is counted), and the longest stall:
                      the longest time between two answers on one
                      connection. --timeout: seconds a request may take
                      (default 2). While the pause file exists no request
                      is sent (the connections stay open and idle; paused
                      time is not a stall). --sources: the connections'
                      source addresses, in turn (default: the kernel's)
  stream SECONDS      new connections in a loop; one JSON line per second
                      with that second's answers per backend and failures
  udp SIZE COUNT      COUNT datagrams of SIZE bytes from COUNT source ports;
                      reports which backend answered and the length it got
  udp-flows SIZE COUNT  from each of COUNT source ports a small datagram,
                      then one of SIZE bytes (fragmented on the way):
                      which backend answered each, per flow
"""

import argparse
import http.client
import json
import os
import socket
import sys
import time

VIP = "10.99.1.10"
VIP6 = "fd99:1::10"


def get(conn):
    conn.request("GET", "/")
    r = conn.getresponse()
    body = r.read().decode().strip()
    if r.status != 200 or not body.startswith("backend="):
        raise RuntimeError(f"status {r.status} body {body!r}")
    return body.removeprefix("backend=")


def new_connection(vip, timeout, tally):
    """One request on a new connection; counts its backend or the failure."""
    conn = http.client.HTTPConnection(vip, 80, timeout=timeout)
    try:
        b = get(conn)
        tally["counts"][b] = tally["counts"].get(b, 0) + 1
    except (OSError, RuntimeError, http.client.HTTPException):
        tally["failures"] += 1
    finally:
        conn.close()


def spread(n, vip=VIP, timeout=2.0):
    tally = {"counts": {}, "failures": 0}
    for _ in range(n):
        new_connection(vip, timeout, tally)
    return tally


def hold(seconds, k, timeout=2, pause_file=None, sources=()):
    def connection(i):
        source = (sources[i % len(sources)], 0) if sources else None
        return http.client.HTTPConnection(VIP, 80, timeout=timeout, source_address=source)
    conns = [connection(i) for i in range(k)]
    seen = [[] for _ in range(k)]
    failures = [0] * k
    failed_at = [[] for _ in range(k)]
    requests = 0
    # The longest time between two answers on one connection, when (wall
    # clock) it ended, and on which connection.
    last = [None] * k
    stall, stall_end, stall_conn = 0.0, None, None
    paused = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pause_file and os.path.exists(pause_file):
            t = time.monotonic()
            while os.path.exists(pause_file) and time.monotonic() < deadline:
                time.sleep(0.02)
            paused += time.monotonic() - t
            last = [None] * k
            continue
        for i, c in enumerate(conns):
            try:
                b = get(c)
                requests += 1
                now = time.monotonic()
                if last[i] is not None and now - last[i] > stall:
                    stall, stall_end, stall_conn = now - last[i], time.time(), i
                last[i] = now
                if not seen[i] or seen[i][-1] != b:
                    seen[i].append(b)
            except (OSError, RuntimeError, http.client.HTTPException) as e:
                failures[i] += 1
                failed_at[i].append(time.time())
                last[i] = None
                print(f"hold: connection {i}: {e!r}", file=sys.stderr)
                c.close()
                conns[i] = connection(i)
        time.sleep(0.05)
    for c in conns:
        c.close()
    return {"backends": seen, "failures": failures, "requests": requests,
            "failed_at": failed_at, "max_stall": round(stall, 3), "max_stall_end": stall_end,
            "max_stall_connection": stall_conn, "paused": round(paused, 3)}


def stream(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick = time.monotonic() + 1
        tally = {"counts": {}, "failures": 0}
        while time.monotonic() < tick:
            new_connection(VIP, 1, tally)
            time.sleep(0.005)
        print(json.dumps(tally), flush=True)
    return None


def udp(size, count):
    counts, lengths, lost = {}, set(), 0
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.connect((VIP, 5000))
        s.send(b"u" * size)
        try:
            reply = s.recv(2048).decode()
            name, length = reply.removeprefix("backend=").split(" len=")
            counts[name] = counts.get(name, 0) + 1
            lengths.add(int(length))
        except (OSError, ValueError):
            lost += 1
        s.close()
    return {"counts": counts, "lengths": sorted(lengths), "lost": lost}


def udp_flows(size, count):
    """Per flow (source port): the backend that answered its small
    datagram and the one that answered its large one."""
    flows, lost = [], 0
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.connect((VIP, 5000))
        seen = []
        for n in (8, size):
            s.send(b"f" * n)
            try:
                reply = s.recv(2048).decode()
                seen.append(reply.removeprefix("backend=").split(" len=")[0])
            except (OSError, ValueError):
                lost += 1
        if len(seen) == 2:
            flows.append(seen)
        s.close()
    return {"flows": flows, "lost": lost}


def hold_command(argv):
    p = argparse.ArgumentParser(prog="client.py hold")
    p.add_argument("seconds", type=float)
    p.add_argument("k", type=int)
    p.add_argument("--timeout", type=float, default=2)
    p.add_argument("--pause-file")
    p.add_argument("--sources", default="")
    a = p.parse_args(argv)
    return hold(a.seconds, a.k, a.timeout, a.pause_file,
                [s for s in a.sources.split(",") if s])


def main():
    cmd = sys.argv[1]
    if cmd == "hold":
        print(json.dumps(hold_command(sys.argv[2:])))
        return
    args = [int(float(a)) if a.isdigit() else float(a) for a in sys.argv[2:]]
    if cmd == "spread":
        out = spread(int(args[0]), timeout=float(args[1]) if len(args) > 1 else 2.0)
    elif cmd == "spread6":
        out = spread(int(args[0]), VIP6, float(args[1]) if len(args) > 1 else 2.0)
    elif cmd == "stream":
        out = stream(args[0])
    elif cmd == "udp":
        out = udp(int(args[0]), int(args[1]))
    elif cmd == "udp-flows":
        out = udp_flows(int(args[0]), int(args[1]))
    else:
        sys.exit(f"unknown command {cmd}")
    if out is not None:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
