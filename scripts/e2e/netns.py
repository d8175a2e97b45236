"""Namespaces left by earlier runs of a live suite: each run names its
namespaces PREFIX<pid>-<role>, so a namespace whose run is gone (or a
zombie) is stale, and so is everything still running in it."""

import re
import subprocess


def alive(pid):
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def remove_stale(prefix):
    """Deletes the namespaces of earlier runs whose process is gone, with
    what still runs in them (a killed run leaves its sluice running)."""
    listed = subprocess.run(["ip", "netns", "list"], text=True, capture_output=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{prefix}(\d+)-\w+", name)
        if m and not alive(int(m.group(1))):
            pids = subprocess.run(["ip", "netns", "pids", name], text=True,
                                  capture_output=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], check=False)
            subprocess.run(["ip", "netns", "del", name], check=False)
