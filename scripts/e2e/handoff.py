#!/usr/bin/env python3
"""The live conntrack hand-off test: real kernel clients and HTTP backends
(the lab of lab.py: namespaces, sluice on net_af_packet, layer-2 DSR),
keep-alive connections across a SIGTERM of sluice and a new `sluice run`
of the same configuration path. Run as root:

    scripts/e2e/handoff.py [--sluice target/debug/sluice] [--scenarios ABCD]

Each run has two groups of K connections (`client.py hold`, from five
client addresses in turn, so that two workers share the address pairs):

  looping  requests in a loop straight through the restart (TCP
           retransmits across the gap); the longest time between two
           answers on one connection is the stall the restart costs
  idle     no request from just before the SIGTERM until the new sluice's
           probes have had time for their verdicts (every backend in its
           final state, at least 3 s after /ready), then requests again

Each scenario runs twice in one lab, each time from a fresh start with
empty conntrack: with the hand-off (`--handoff-file` in the lab's
directory) and without it (`--no-handoff`, the control).

  A  table change: b1,b2 before the restart, b1,b2,b3 after (Maglev moves
     about a third of the connections to b3, which resets them). Without
     the hand-off the idle group fails (placed once b3 proved itself);
     the looping group may: its retransmissions reach the new sluice
     while its probes decide and b3's next hop resolves, and whether a
     third of them go to b3 depends on which comes first (reported, not
     required)
  B  persistence on an unhealthy backend (CT-8): b1,b2,b3; once the
     connections are open b2's /health fails (its port 80 still answers)
     and sluice marks it unhealthy; its connections persist. Without the
     hand-off the idle group fails (placed afresh over the healthy b1, b3,
     which reset them); the looping group need not: its first packets
     reach a sluice on which every backend is still unhealthy, which
     places them over all three — where they were
  C  failover pool: b1 primary, b2 and b3 `failover = true`; b1's /health
     fails from the start, so the failover pool serves and the connections
     open on b2 and b3. Without the hand-off the looping group fails: a
     new sluice with every backend unhealthy sends to the primaries
     (EL-4), b1, which resets them; the idle group need not (once the
     probes agree, the failover pool serves again). The looping group's
     first packets reach the new sluice at TCP's next retransmission
     after /ready, well within the second its probes need for a verdict
  D  worker count: 1 worker before, 2 after (qpairs=2, software steering),
     with b3 added as in A so that an entry restored to the wrong worker
     shows as a move; without the hand-off both groups fail

With the hand-off a scenario passes when: every connection of both groups
saw exactly one backend with 0 failures; the stopping sluice wrote every
open connection (at least 2 K) and the new one took all it wrote; the
backends' health right after the restart is what it was before it
(seeded; a backend new to the configuration unhealthy); the new workers'
conntrack holds the taken connections (D: every worker some); and (A, D)
new connections reach b3, (B) new connections avoid b2, (C) the
connections are on b2 and b3 only. Without the hand-off a scenario passes
when the groups named above have failed connections (none failing means
the restart did not test anything) and nothing was written or taken. In
both, no connection may fail before the SIGTERM.

Measured per restart: SIGTERM to the old process's exit and to the new
one's /ready answering 200, to the new one's next hops for the backends
(its log), and the looping group's longest stall.

Fails (exit 1) when: a check above fails; sluice does not stop cleanly
(exit code other than 0) or does not come up; the backends do not reach
the expected health; the lab cannot be built; a client run ends too early
to cover the restart; or not root.
"""

import argparse
import datetime
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, failures, wait_for  # noqa: E402
from lab import CLIENT, SUBNET, Lab  # noqa: E402

PREFIX = "slh"
# The connections come from these addresses in turn: several address
# pairs, which two workers share (a worker owns an address pair, AP-1).
SOURCES = [CLIENT] + [f"{SUBNET}.{i}" for i in range(101, 105)]
# Seconds a request may take: TCP retransmits through the restart's gap.
REQUEST_TIMEOUT = 20
# Traffic before the SIGTERM, and after the restart (and the idle group's
# pause).
BEFORE = 2.5
AFTER = 4.0
# The idle group waits at least this long after /ready: the lab's check
# (interval 1 s, 2 successes) has its verdicts by then.
VERDICTS = 3.0

report = []


def name_of(lab, ip):
    for i in range(1, 5):
        if lab.backend_ip(i) == ip:
            return f"b{i}"
    return ip


def states(lab):
    """{b1: healthy|unhealthy|…} of the web service."""
    try:
        return {name_of(lab, ip): s for ip, s in lab.backend_states("web").items()}
    except RuntimeError:
        return {}


def wait_states(lab, want, timeout=15):
    t = wait_for(lambda: states(lab) == want, timeout, step=0.1)
    if t is None:
        raise RuntimeError(f"backends not {want}: {states(lab)}")
    return t


def wait_next_hops(lab, backends):
    """Until sluice has the next hop of every backend (the kernel's ARP
    through the TAP, which the health probes fill)."""
    ips = {lab.backend_ip(i) for i in backends}

    def resolved():
        m = lab.metrics(quiet=True)
        done = {ip for ip in ips for k, v in m.items()
                if k.startswith("sluice_backend_next_hop_resolved{") and 'service="web"' in k
                and f'backend="{ip}"' in k and v == 1}
        return done == ips
    for i in backends:
        lab.run_in("lb", "ping", "-c", "1", "-W", "1", lab.backend_ip(i), check=False)
    if wait_for(resolved, 10, step=0.1) is None:
        raise RuntimeError("backends' next hops not resolved")


def entries_per_worker(lab):
    """{worker: sluice_conntrack_entries}."""
    m = lab.metrics(quiet=True)
    return {k.split('worker="')[1].split('"')[0]: int(v) for k, v in m.items()
            if k.startswith("sluice_conntrack_entries{")}


def unresolved_drops(lab):
    """Packets the running sluice dropped for want of a next hop."""
    return int(sum(v for k, v in lab.metrics(quiet=True).items()
                   if k.startswith("sluice_dropped_packets_total{")
                   and 'reason="next_hop_unresolved"' in k))


def direct(lab, i, path):
    """An HTTP request from the client straight to backend i's address:
    (status, body)."""
    out = lab.run_in("c", "curl", "-s", "-m", "2", "-w", "\n%{http_code}",
                     f"http://{lab.backend_ip(i)}{path}", check=False)
    body, _, code = (out if isinstance(out, str) else "").strip().rpartition("\n")
    return code, body.strip()


def handoff_lines(text):
    """What sluice's hand-off log lines say: connections written (and the
    file's size and time), taken (of how many, how long after the write),
    and a refusal."""
    out = {"written": None, "bytes": None, "write_ms": None, "taken": None, "of": None,
           "gap_ms": None, "taken_line": None, "refused": None}
    m = re.search(r"conntrack hand-off \S+: (\d+) connection\(s\) written for the next start "
                  r"\((\d+) bytes, (\d+) ms\)", text)
    if m:
        out.update(written=int(m.group(1)), bytes=int(m.group(2)), write_ms=int(m.group(3)))
    m = re.search(r"conntrack hand-off \S+: (\d+) of (\d+) connection\(s\) taken from sluice "
                  r"\S+ \((\d+) ms before this start[;)][^\n]*", text)
    if m:
        out.update(taken=int(m.group(1)), of=int(m.group(2)), gap_ms=int(m.group(3)),
                   taken_line=m.group(0))
    m = re.search(r"conntrack hand-off \S+ refused[^\n]*", text)
    if m:
        out["refused"] = m.group(0)
    return out


def next_hops_resolved(text, ips):
    """The wall-clock time at which the last of `ips` got its next hop in
    this log (None: not all did)."""
    at = {}
    for m in re.finditer(r"^(\S+Z) INFO sluice: backend (\S+): next hop resolved", text, re.M):
        if m.group(2) in ips:
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
            at[m.group(2)] = t.replace(tzinfo=datetime.timezone.utc).timestamp()
    return max(at.values()) if set(at) == set(ips) else None


class Scenario:
    def __init__(self, key, title, before, after, failing, workers=(1, 1), failover=(),
                 down_from_start=None, down_before_restart=None):
        self.key = key
        self.title = title
        self.before = before
        self.after = after
        # The groups that must lose connections without the hand-off.
        self.failing = failing
        self.workers = workers
        self.failover = failover
        self.down_from_start = down_from_start
        self.down_before_restart = down_before_restart

    def down(self):
        return self.down_from_start or self.down_before_restart

    def expected(self, backends, down):
        return {f"b{i}": "unhealthy" if i == down else "healthy" for i in backends}


SCENARIOS = {
    "A": Scenario("A", "table change b1,b2 -> b1,b2,b3", [1, 2], [1, 2, 3],
                  failing=("idle",)),
    "B": Scenario("B", "CT-8: connections persisting on unhealthy b2", [1, 2, 3], [1, 2, 3],
                  failing=("idle",), down_before_restart=2),
    "C": Scenario("C", "failover pool (b1 primary unhealthy; b2, b3 failover) serving",
                  [1, 2, 3], [1, 2, 3], failing=("looping",), failover=(2, 3),
                  down_from_start=1),
    "D": Scenario("D", "1 -> 2 workers, b3 added", [1, 2], [1, 2, 3],
                  failing=("looping", "idle"), workers=(1, 2)),
}
GROUPS = ("looping", "idle")


def group_summary(h):
    seen = h["backends"]
    return {
        "connections": len(seen),
        "failed": sum(1 for n in h["failures"] if n),
        "failures": sum(h["failures"]),
        "one_backend": all(len(s) == 1 for s in seen),
        "per_backend": {b: sum(1 for s in seen if s and s[0] == b)
                        for b in sorted({s[0] for s in seen if s})},
    }


def run(lab, sc, handoff, k):
    mode = "with hand-off" if handoff else "without hand-off"
    tag = f"{sc.key} {mode}"
    print(f"scenario {tag}: {sc.title}; {k} looping and {k} idle connections", flush=True)
    lab.discard_handoff()
    for i in (1, 2, 3):
        lab.set_health(i, i != sc.down_from_start)
    lab.workers = sc.workers[0]
    lab.write_config(sc.before, failover=sc.failover)
    lab.start_sluice(handoff=handoff)
    wait_states(lab, sc.expected(sc.before, sc.down_from_start))
    wait_next_hops(lab, sc.before)
    pause = os.path.join(lab.dir, f"pause-{sc.key}-{int(handoff)}")
    # The clients' run: the traffic before the SIGTERM, B's health flip,
    # the restart and the idle group's wait (budgeted generously, checked
    # below), the traffic after it.
    seconds = BEFORE + AFTER + VERDICTS + 6 + (5 if sc.down_before_restart else 0)
    common = ["hold", seconds, k, "--timeout", REQUEST_TIMEOUT, "--sources", ",".join(SOURCES)]
    client_started = time.time()
    bg = {"looping": lab.client_background(*common),
          "idle": lab.client_background(*common, "--pause-file", pause)}
    time.sleep(BEFORE)
    if sc.down_before_restart:
        d = sc.down_before_restart
        lab.set_health(d, False)
        t = wait_for(lambda: states(lab).get(f"b{d}") == "unhealthy", 10, step=0.1)
        check(t is not None, f"{tag}: b{d} marked unhealthy before the restart (took {t})")
        data, health = direct(lab, d, "/"), direct(lab, d, "/health")
        check(data == ("200", f"backend=b{d}") and health[0] == "503",
              f"{tag}: b{d}'s port 80 answers ({data}), only its /health fails ({health})")
        time.sleep(1.0)
    open(pause, "w").close()
    time.sleep(0.5)
    after = sc.expected(sc.after, sc.down())
    if handoff:
        # Backends of the file keep their health; a new one starts
        # unhealthy (HC-3).
        seeded = {b: s if int(b[1:]) in sc.before else "unhealthy" for b, s in after.items()}
    else:
        seeded = {b: "unhealthy" for b in after}

    def rewrite():
        lab.workers = sc.workers[1]
        lab.write_config(sc.after, failover=sc.failover)
    sigterm = time.time()
    r = lab.restart_sluice(rewrite=rewrite, handoff=handoff)
    ready_at = time.time()
    first = states(lab)
    check(r["rc"] == 0, f"{tag}: the stopped sluice exited 0 ({r['rc']})")
    ho = handoff_lines(r["stop_log"])
    ho_start = handoff_lines(lab.sluice_output(lab.sluice_log_start))
    for key in ("taken", "of", "gap_ms", "taken_line"):
        ho[key] = ho_start[key]
    ho["refused"] = ho_start["refused"]
    written, taken = ho["written"], ho["taken"]
    # The workers publish their conntrack gauges once running.
    restored = {}
    if taken:
        wait_for(lambda: sum(entries_per_worker(lab).values()) >= taken, 5, step=0.1)
        restored = entries_per_worker(lab)
    # The idle group: once the new sluice's probes have had their verdicts.
    t = wait_for(lambda: states(lab) == after, 15, step=0.1)
    check(t is not None, f"{tag}: after the restart the backends are {after} ({states(lab)})")
    time.sleep(max(0.0, ready_at + VERDICTS - time.time()) + 0.5)
    os.remove(pause)
    resumed = time.time()
    h = {g: lab.collect(bg[g]) for g in GROUPS}
    s = {g: group_summary(h[g]) for g in GROUPS}
    unresolved = unresolved_drops(lab)
    log = lab.sluice_output(lab.sluice_log_start)
    hops_at = next_hops_resolved(log, {lab.backend_ip(i) for i in sc.before})
    client_ended = client_started + seconds
    check(client_ended - resumed >= AFTER - 0.5,
          f"{tag}: traffic ran {client_ended - resumed:.1f} s after the idle group resumed "
          f"(at least {AFTER - 0.5})")
    early = [t for g in GROUPS for ts in h[g]["failed_at"] for t in ts if t < sigterm]
    check(not early, f"{tag}: no connection failed before the SIGTERM ({len(early)})")
    loop = h["looping"]
    out = {"tag": tag, "groups": s, "exited": r["exited"], "ready": r["ready"],
           "stall": loop["max_stall"], "written": written, "taken": taken,
           "hops": None if hops_at is None else hops_at - sigterm, "restored": restored,
           "unresolved": unresolved}
    if loop["max_stall_end"] is not None:
        out["stall_end"] = loop["max_stall_end"] - sigterm
    if handoff:
        for g in GROUPS:
            check(s[g]["failures"] == 0 and s[g]["one_backend"],
                  f"{tag}: {g}: every connection kept one backend with 0 failures "
                  f"(failures {h[g]['failures']}, backends {h[g]['backends']})")
        check(written is not None and written >= 2 * k,
              f"{tag}: the stopping sluice wrote >= {2 * k} connections ({written})")
        check(taken is not None and taken == written == ho["of"] and ho["refused"] is None,
              f"{tag}: the new sluice took all of them ({ho['taken_line'] or ho['refused']})")
        check(first == seeded, f"{tag}: health right after the restart is the seeded "
              f"{seeded} ({first})")
        check(sum(restored.values()) == taken,
              f"{tag}: the new workers' conntrack holds the {taken} taken connections "
              f"(entries per worker {restored})")
    else:
        check(written is None and taken is None,
              f"{tag}: no hand-off written or taken (--no-handoff)")
        for g in sc.failing:
            check(s[g]["failed"] > 0,
                  f"{tag}: {g}: the restart costs connections without the hand-off "
                  f"({s[g]['failed']} of {k} connections failed)")
    if sc.failover:
        primaries = {f"b{i}" for i in sc.before if i not in sc.failover}
        on = {b for g in GROUPS for b in s[g]["per_backend"]}
        check(not on & primaries,
              f"{tag}: the connections opened on the failover pool "
              f"({[s[g]['per_backend'] for g in GROUPS]})")
    if sc.down_before_restart:
        d = f"b{sc.down_before_restart}"
        check(all(s[g]["per_backend"].get(d, 0) > 0 for g in GROUPS),
              f"{tag}: connections of both groups were on {d} when it turned unhealthy "
              f"({[s[g]['per_backend'] for g in GROUPS]})")
    if sc.workers[1] > 1:
        m = entries_per_worker(lab)
        check(len(m) == sc.workers[1], f"{tag}: the new sluice runs {sc.workers[1]} workers "
              f"(entries per worker {m})")
        if handoff:
            check(len(restored) == sc.workers[1] and all(restored.values()),
                  f"{tag}: every worker holds taken connections ({restored})")
    if handoff:
        # New connections follow the new process's tables.
        if 3 in sc.after and 3 not in sc.before:
            sp = lab.client("spread", 60)
            check(sp["failures"] == 0 and sp["counts"].get("b3", 0) > 0,
                  f"{tag}: new connections reach b3 ({sp})")
        if sc.down_before_restart:
            sp = lab.client("spread", 30)
            check(sp["failures"] == 0 and f"b{sc.down_before_restart}" not in sp["counts"],
                  f"{tag}: new connections avoid b{sc.down_before_restart} ({sp})")
    rc = lab.stop_sluice()
    check(rc == 0, f"{tag}: sluice stopped cleanly ({rc})")
    lab.discard_handoff()
    groups = "; ".join(f"{g}: {s[g]['failed']}/{k} failed ({s[g]['failures']} failures), "
                       f"first backends {s[g]['per_backend']}" for g in GROUPS)
    line = (f"{tag}: {groups}; SIGTERM -> exit {r['exited']:.2f} s, -> /ready "
            f"{r['ready']:.2f} s, -> next hops "
            + ("?" if out["hops"] is None else f"{out['hops']:.2f} s")
            + f" ({unresolved} packets dropped as next_hop_unresolved)"
            + f"; looping stall {loop['max_stall']:.2f} s"
            + (f" (ending {out['stall_end']:.2f} s after the SIGTERM)" if "stall_end" in out
               else "")
            + f"; idle group idle {h['idle']['paused']:.1f} s"
            + (f"; hand-off {written} written ({ho['bytes']} bytes, {ho['write_ms']} ms), "
               f"{taken} taken {ho['gap_ms']} ms after the write, entries per worker "
               f"{restored}" if handoff else ""))
    report.append(line)
    print(f"  {line}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", help="binary (default target/debug/sluice)")
    ap.add_argument("--connections", type=int, default=24, help="per group")
    ap.add_argument("--scenarios", default="ABCD", help="which scenarios, e.g. AD")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("handoff: needs root (network namespaces)")
    lab = Lab(workers=1, sluice=a.sluice and os.path.abspath(a.sluice), prefix=PREFIX)
    if not os.access(lab.sluice_bin, os.X_OK):
        sys.exit(f"handoff: {lab.sluice_bin} not built")
    started = time.monotonic()
    results = {}
    try:
        lab.build()
        for addr in SOURCES[1:]:
            lab.run_in("c", "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
        for i in (1, 2, 3):
            lab.start_backend(i)
        for key in a.scenarios:
            for handoff in (True, False):
                results[(key, handoff)] = run(lab, SCENARIOS[key], handoff, a.connections)
    except Exception as e:  # noqa: BLE001 — reported as a failure below
        failures.append(f"handoff error: {e}")
        print(f"  FAIL {e}")
    finally:
        if failures and lab.sluice is not None:
            print("--- sluice log ---\n"
                  + lab.sluice_output(getattr(lab, "sluice_log_start", 0))[-4000:])
        lab.close()
    print(f"handoff ({time.monotonic() - started:.0f} s):")
    for line in report:
        print(f"  {line}")
    for key in a.scenarios:
        w, wo = results.get((key, True)), results.get((key, False))
        if w and wo:
            print(f"handoff: scenario {key}: failed connections (looping + idle) with the "
                  f"hand-off {sum(w['groups'][g]['failed'] for g in GROUPS)}/{2 * a.connections}"
                  f", without {sum(wo['groups'][g]['failed'] for g in GROUPS)}"
                  f"/{2 * a.connections}")
    if results:
        def span(key, handoff=None):
            v = [r[key] for (_, h), r in results.items()
                 if r.get(key) is not None and handoff in (None, h)]
            return f"{min(v):.2f}–{max(v):.2f} s" if v else "?"
        print(f"handoff: SIGTERM -> old sluice exited {span('exited')}, -> new sluice /ready "
              f"{span('ready')}, -> its next hops resolved {span('hops')}; the looping "
              f"group's longest stall with the hand-off {span('stall', True)} (without "
              f"{span('stall', False)})")
    if failures:
        print(f"handoff: {len(failures)} failure(s)")
        for f in failures:
            print(f"  - {f}")
        sys.exit(1)
    print("handoff: all passed")


if __name__ == "__main__":
    main()
