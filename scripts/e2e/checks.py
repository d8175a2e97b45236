"""What every live test script shares: named checks that print one line
each and are collected as failures, and polling with a deadline."""

import time

# Every failed check's description, in order; a script exits non-zero
# when it is not empty.
failures = []


def check(ok, what):
    """Prints `ok`/`FAIL` and `what`; a failure is remembered. Returns `ok`."""
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)
    return ok


def wait_for(pred, timeout, step=0.05):
    """Seconds until `pred()` held, or None if it did not within `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if pred():
            return time.monotonic() - start
        time.sleep(step)
    return None
