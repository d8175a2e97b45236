#!/usr/bin/env python3
"""One 802.1Q switch port pair in user space: a trunk interface (the VM's
data NIC's TAP) carrying one VLAN tagged, and an access interface (a veth
into the hosts' bridge) carrying it untagged. The boot test's host kernel
has no 802.1Q support (no vlan devices, no VLAN-filtering bridge, no tc
vlan action), so the tag is pushed and popped here.

  trunk -> access: frames tagged with --vlan lose the tag; untagged frames
                   and other VLANs are dropped and counted (an appliance
                   port with `vlan = N` must tag everything it sends)
  access -> trunk: every frame gets the tag (PCP 0)

The kernel takes an inline tag off a received frame before packet sockets
see it and hands it over as PACKET_AUXDATA; both forms are read. Counters
are written as JSON to --stats on SIGTERM/SIGINT and every second.

Usage (inside the namespace holding both interfaces):
  vlan_switch.py --trunk TAP --access VETH --vlan 100 --stats FILE
"""

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_OUTGOING = 4
TP_STATUS_VLAN_VALID = 0x10
TPID_8021Q = 0x8100
TPID_8021AD = 0x88A8
AUXDATA = struct.Struct("IIIHHHH")


def open_socket(ifname):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((ifname, 0))
    s.setblocking(False)
    return s


def receive(sock):
    """Frames received on sock as (frame, vlan id or None), own sends skipped."""
    out = []
    while True:
        try:
            data, anc, _flags, addr = sock.recvmsg(65536, socket.CMSG_SPACE(AUXDATA.size))
        except BlockingIOError:
            return out
        if addr[2] == PACKET_OUTGOING:
            continue
        vid = None
        for level, kind, payload in anc:
            if level == SOL_PACKET and kind == PACKET_AUXDATA and len(payload) >= AUXDATA.size:
                status, _len, _snap, _mac, _net, tci, _tpid = AUXDATA.unpack_from(payload)
                if status & TP_STATUS_VLAN_VALID:
                    vid = tci & 0x0FFF
        if vid is None and len(data) >= 18:
            tpid = struct.unpack_from("!H", data, 12)[0]
            if tpid in (TPID_8021Q, TPID_8021AD):
                vid = struct.unpack_from("!H", data, 14)[0] & 0x0FFF
                data = data[:12] + data[16:]
        out.append((data, vid))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trunk", required=True)
    ap.add_argument("--access", required=True)
    ap.add_argument("--vlan", type=int, required=True)
    ap.add_argument("--stats", required=True)
    args = ap.parse_args()
    trunk, access = open_socket(args.trunk), open_socket(args.access)
    tag = struct.pack("!HH", TPID_8021Q, args.vlan & 0x0FFF)
    stats = {"trunk_to_access": 0, "access_to_trunk": 0, "trunk_untagged": 0,
             "trunk_other_vlan": 0, "send_errors": 0}

    def write_stats():
        tmp = args.stats + ".tmp"
        with open(tmp, "w") as f:
            json.dump(stats, f)
        os.replace(tmp, args.stats)

    def stop(_sig, _frame):
        write_stats()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    write_stats()
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([trunk, access], [], [], 1.0)
        if trunk in ready:
            for frame, vid in receive(trunk):
                if vid is None:
                    stats["trunk_untagged"] += 1
                elif vid != args.vlan:
                    stats["trunk_other_vlan"] += 1
                else:
                    try:
                        access.send(frame)
                        stats["trunk_to_access"] += 1
                    except OSError:
                        stats["send_errors"] += 1
        if access in ready:
            for frame, _vid in receive(access):
                try:
                    trunk.send(frame[:12] + tag + frame[12:])
                    stats["access_to_trunk"] += 1
                except OSError:
                    stats["send_errors"] += 1
        if time.monotonic() - last >= 1.0:
            write_stats()
            last = time.monotonic()


if __name__ == "__main__":
    main()
