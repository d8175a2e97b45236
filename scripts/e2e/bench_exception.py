#!/usr/bin/env python3
"""Exception-path round trip (AP-4): a ping flood from the lab's client to
the appliance's address, answered by the kernel through the TAP. Prints
ping's summary and the punt/inject counters; timing fails nothing.

    python3 scripts/e2e/bench_exception.py [--count N] [--sluice target/release/sluice]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lab import APPLIANCE, Lab  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--sluice", default=None)
    a = ap.parse_args()
    lab = Lab(workers=1, sluice=a.sluice)
    try:
        lab.build()
        lab.write_config([1, 2, 3])
        lab.start_sluice()
        time.sleep(1)
        out = lab.run_in("c", "ping", "-f", "-c", str(a.count), "-q", APPLIANCE, check=False)
        print(out.strip())
        m = lab.metrics()
        for k in ("punted", "injected", "inject_failed"):
            key = f'sluice_port_{k}_packets_total{{port="uplink"}}'
            print(f"{key} {int(m.get(key, 0))}")
    finally:
        lab.close()


if __name__ == "__main__":
    main()
