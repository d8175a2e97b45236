#!/usr/bin/env python3
"""Client traffic for the scale-out suite (runs in its client namespace):
many TCP connections from many source addresses, so the router's ECMP
hash spreads them over the appliances. Every command prints one JSON
object on stdout.

  streams SECONDS COUNT VIP READY   COUNT keep-alive connections, each
      sending a request every 0.5 s for SECONDS; once all are up and
      answered, writes their (source, port) pairs to the file READY. Per
      connection: its source port, the backends that answered, the
      number of answers, the times of the first and last answer, the
      longest gap between two, and the error that ended it early (a
      reset, a close, no answer within 20 s)
  churn SECONDS RATE VIP            a new connection (one request) every
      1/RATE s; counts answered and failed ones
  spread N VIP                      N new connections, 16 at a time;
      answers per backend and failures

Source addresses: every address of eth0 but the first (the suite adds
them), used round-robin.
"""

import asyncio
import json
import os
import subprocess
import sys
import time

PORT = 80
REQUEST_EVERY = 0.5
ANSWER_WITHIN = 20.0


def sources():
    out = subprocess.run(["ip", "-j", "addr", "show", "dev", "eth0"], check=True,
                         capture_output=True, text=True).stdout
    addrs = [a["local"] for a in json.loads(out)[0]["addr_info"] if a["family"] == "inet"]
    return addrs[1:] or addrs


async def get(reader, writer, vip):
    """One request on an open connection; the answering backend's name."""
    writer.write(f"GET / HTTP/1.1\r\nHost: {vip}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.decode().split("\r\n"):
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
    body = (await reader.readexactly(length)).decode().strip()
    return body.removeprefix("backend=")


async def connect(src, vip, timeout):
    return await asyncio.wait_for(
        asyncio.open_connection(vip, PORT, local_addr=(src, 0)), timeout)


async def stream_one(i, src, vip, until, ready, record):
    rec = {"src": src, "sport": None, "backends": [], "answers": 0, "first": None,
           "last": None, "gap": 0.0, "error": None}
    record.append(rec)
    try:
        reader, writer = await connect(src, vip, 10)
        rec["sport"] = writer.get_extra_info("sockname")[1]
        while True:
            b = await asyncio.wait_for(get(reader, writer, vip), ANSWER_WITHIN)
            now = time.time()
            if rec["last"] is not None:
                rec["gap"] = max(rec["gap"], now - rec["last"])
            rec["first"] = rec["first"] or now
            rec["last"] = now
            rec["answers"] += 1
            if not rec["backends"] or rec["backends"][-1] != b:
                rec["backends"].append(b)
            if rec["answers"] == 1:
                ready.release()
            if now >= until:
                break
            await asyncio.sleep(REQUEST_EVERY)
        writer.close()
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, RuntimeError) as e:
        rec["error"] = type(e).__name__ + (f": {e}" if str(e) else "")
        if rec["answers"] == 0:
            ready.release()


async def streams(seconds, count, vip, ready_path):
    srcs = sources()
    until = time.time() + seconds
    ready = asyncio.Semaphore(0)
    record = []
    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(
            stream_one(i, srcs[i % len(srcs)], vip, until, ready, record)))
        if i % 16 == 15:
            await asyncio.sleep(0.02)
    for _ in range(count):
        await ready.acquire()
    with open(ready_path + ".tmp", "w") as f:
        json.dump([[r["src"], r["sport"]] for r in record if r["sport"]], f)
    os.rename(ready_path + ".tmp", ready_path)
    await asyncio.gather(*tasks)
    return {"connections": record}


async def one_request(src, vip, tally):
    try:
        reader, writer = await connect(src, vip, 10)
        b = await asyncio.wait_for(get(reader, writer, vip), 10)
        tally["counts"][b] = tally["counts"].get(b, 0) + 1
        writer.close()
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, RuntimeError) as e:
        tally["failures"] += 1
        tally["errors"].append(type(e).__name__)


async def churn(seconds, rate, vip):
    srcs = sources()
    tally = {"counts": {}, "failures": 0, "errors": []}
    tasks = []
    start = time.time()
    i = 0
    while time.time() - start < seconds:
        tasks.append(asyncio.create_task(one_request(srcs[i % len(srcs)], vip, tally)))
        i += 1
        await asyncio.sleep(1 / rate)
    await asyncio.gather(*tasks)
    tally["errors"] = sorted(set(tally["errors"]))
    return tally


async def spread(n, vip):
    srcs = sources()
    tally = {"counts": {}, "failures": 0, "errors": []}
    sem = asyncio.Semaphore(16)

    async def bounded(i):
        async with sem:
            await one_request(srcs[i % len(srcs)], vip, tally)

    await asyncio.gather(*(bounded(i) for i in range(n)))
    tally["errors"] = sorted(set(tally["errors"]))
    return tally


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "streams":
        out = asyncio.run(streams(float(args[0]), int(args[1]), args[2], args[3]))
    elif cmd == "churn":
        out = asyncio.run(churn(float(args[0]), float(args[1]), args[2]))
    elif cmd == "spread":
        out = asyncio.run(spread(int(args[0]), args[1]))
    else:
        sys.exit(f"unknown command {cmd}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
