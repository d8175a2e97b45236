#!/usr/bin/env python3
"""Where a function's instructions go, by line of sluice's own source.

    KEEP=1 CALLGRIND_EXTRA=--dump-instr=yes TRAFFIC=tcp scripts/bench-instructions.sh
    scripts/profile-lines.py WORK/cg.PID-THREAD --binary target/release/sluice \\
        --packets N [--function '::handle_burst$'] [--top 40] [--anchor RE]

callgrind attributes an inlined helper's instructions to the helper's own
line (`slice/index.rs`, `option.rs`), which says nothing about which of
our lines paid for them. With `--dump-instr=yes` the file has a cost per
instruction address; this maps each address through `addr2line -i` (the
chain of inlined frames, innermost first) to the innermost frame in this
repository's source, and sums the function's self cost by that line. The
binary's load offset comes from the function's lowest executed address
against its symbol (`nm`). Prints instructions per packet by line, then
by file.
"""

import argparse
import collections
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(path, function):
    """{address: self cost} of the functions matching `function`, their
    names, and the file's object of them."""
    want = re.compile(function)
    names = {}
    costs = collections.Counter()
    matched = set()
    np, last, fn, in_call = 1, [], "", False

    def named(tok):
        m = re.match(r"\((\d+)\)(?: (.*))?", tok)
        if not m:
            return tok
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), tok)

    def position(tok, i):
        if tok == "*":
            return last[i]
        if tok[0] in "+-":
            step = int(tok[1:], 0)
            return last[i] + (step if tok[0] == "+" else -step)
        return int(tok, 0)

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("positions:"):
                np = len(line.split()) - 1
                last = [0] * np
            elif line.startswith("fn="):
                fn = named(line[3:].strip())
            elif line.startswith("cfn="):
                # Learns the id's name; the callee's cost is not ours.
                named(line[4:].strip())
            elif line.startswith("calls="):
                in_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                pos = [position(parts[i], i) for i in range(min(np, len(parts)))]
                if len(pos) == np:
                    last = pos
                cost = int(parts[np]) if len(parts) > np else 0
                if in_call:
                    in_call = False
                elif want.search(fn):
                    costs[pos[0]] += cost
                    matched.add(fn)
    return costs, matched


def symbol_address(binary, names):
    out = subprocess.run(["nm", "-C", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tT" and parts[2] in names:
            return int(parts[0], 16)
    return None


def frames(binary, addresses):
    """{address: [(function, file, line), …] innermost first}."""
    out = subprocess.run(["addr2line", "-a", "-i", "-f", "-C", "-e", binary]
                         + [hex(a) for a in addresses],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    chains, current, i = {}, None, 0
    while i < len(out):
        if out[i].startswith("0x"):
            current = int(out[i], 16)
            chains[current] = []
            i += 1
            continue
        func, loc = out[i], out[i + 1] if i + 1 < len(out) else "??:0"
        file, _, line = loc.rpartition(":")
        chains[current].append((func, file, line.split(" ")[0]))
        i += 2
    return chains


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("callgrind")
    ap.add_argument("--binary", required=True)
    ap.add_argument("--packets", type=int, required=True)
    ap.add_argument("--function", default=r"::handle_burst$")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--anchor", default=r"::handle_burst$",
                    help="a function entered after the counters were zeroed, for the load offset")
    args = ap.parse_args()
    costs, matched = parse(args.callgrind, args.function)
    if not costs:
        sys.exit(f"profile-lines.py: no cost of {args.function!r} in {args.callgrind} "
                 "(run with CALLGRIND_EXTRA=--dump-instr=yes)")
    # The load offset, from a function whose first instruction ran after
    # the counters were zeroed (its lowest executed address is its
    # symbol's): the burst function runs from its entry every burst; a
    # function entered once, before the dump began (the poll loop), would
    # give a wrong offset of its own.
    anchor_costs, anchor = parse(args.callgrind, args.anchor)
    if not anchor_costs:
        anchor_costs, anchor = costs, matched
    start = symbol_address(args.binary, anchor)
    if start is None:
        sys.exit(f"profile-lines.py: no symbol {sorted(anchor)} in {args.binary}")
    offset = min(anchor_costs) - start
    chains = frames(args.binary, [a - offset for a in sorted(costs)])
    by_line, by_file = collections.Counter(), collections.Counter()
    for a, cost in costs.items():
        chain = chains.get(a - offset, [])
        own = next(((fn, file, line) for fn, file, line in chain if file.startswith(ROOT)),
                   chain[0] if chain else ("?", "?", "0"))
        rel = os.path.relpath(own[1], ROOT) if own[1].startswith(ROOT) else own[1]
        by_line[(rel, own[2])] += cost
        by_file[rel] += cost
    total = sum(costs.values())
    n = args.packets
    print(f"{', '.join(sorted(matched))}: {total / n:.1f} instructions per packet (self)")
    for (file, line), cost in by_line.most_common(args.top):
        print(f"{cost / n:7.2f}  {file}:{line}")
    print("by file:")
    for file, cost in by_file.most_common():
        print(f"{cost / n:7.2f}  {file}")


if __name__ == "__main__":
    main()
