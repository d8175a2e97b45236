#!/usr/bin/env python3
"""Long-lived keep-alive HTTP connections to the VIP across a restart of
sluice (run by boot_traffic.py in the client namespace).

  hold_client.py K [--timeout S]

Opens K connections to 10.99.1.10:80, one thread each, and loops GET /
on each (backend.py answers `backend=<name>`). A request waits up to S
seconds (default 60): while sluice restarts the client's TCP retransmits,
and the request completes once packets flow again. A request that fails
(reset, timeout, bad answer) is counted, and its connection is replaced
by a new one.

Protocol on stdin/stdout, one JSON object a line:
  out  {"ready": [backend of each connection]}  once each has an answer
  in   "stop"                                    finish: each connection
                                                 completes one request
                                                 started after this line
  out  {"backends": [[names in order seen] per connection],
        "failures": [count per connection], "requests": N,
        "max_stall": longest request in seconds, "errors": [text]}
"""

import argparse
import http.client
import json
import sys
import threading
import time

VIP = "10.99.1.10"


def get(conn):
    conn.request("GET", "/")
    r = conn.getresponse()
    body = r.read().decode().strip()
    if r.status != 200 or not body.startswith("backend="):
        raise RuntimeError(f"status {r.status} body {body!r}")
    return body.removeprefix("backend=")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("k", type=int)
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()

    lock = threading.Lock()
    seen = [[] for _ in range(a.k)]
    failures = [0] * a.k
    errors = []
    totals = {"requests": 0, "max_stall": 0.0}
    answered = [threading.Event() for _ in range(a.k)]
    finished = [threading.Event() for _ in range(a.k)]
    stop_at = [None]

    def loop(i):
        conn = http.client.HTTPConnection(VIP, 80, timeout=a.timeout)
        while True:
            started = time.monotonic()
            try:
                b = get(conn)
                took = time.monotonic() - started
                with lock:
                    totals["requests"] += 1
                    totals["max_stall"] = max(totals["max_stall"], took)
                    if not seen[i] or seen[i][-1] != b:
                        seen[i].append(b)
                answered[i].set()
            except (OSError, RuntimeError, http.client.HTTPException) as e:
                with lock:
                    failures[i] += 1
                    errors.append(f"connection {i}: {e!r}")
                conn.close()
                conn = http.client.HTTPConnection(VIP, 80, timeout=a.timeout)
            if stop_at[0] is not None and started >= stop_at[0]:
                break
            time.sleep(0.05)
        conn.close()
        finished[i].set()

    for i in range(a.k):
        threading.Thread(target=loop, args=(i,), daemon=True).start()
    deadline = time.monotonic() + a.timeout
    for e in answered:
        e.wait(max(0.0, deadline - time.monotonic()))
    with lock:
        print(json.dumps({"ready": [s[0] if s else None for s in seen]}), flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop_at[0] = time.monotonic()
    for e in finished:
        e.wait(max(0.0, stop_at[0] + a.timeout + 5 - time.monotonic()))
    with lock:
        print(json.dumps({"backends": seen, "failures": failures, "requests": totals["requests"],
                          "max_stall": round(totals["max_stall"], 2), "errors": errors[:20]}),
              flush=True)


if __name__ == "__main__":
    main()
