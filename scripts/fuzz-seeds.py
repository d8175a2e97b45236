#!/usr/bin/env python3
"""Writes a seed corpus for every fuzz target into OUT/<target>/.

Sources: the repository's own seeds (fuzz/seeds/malformed: raw frames;
fuzz/seeds/pipeline: the `pipeline` target's format, a configuration byte
then one frame), and the frames of every classic pcap file in the
directories given with --pcaps (pcapng and non-Ethernet link types are
skipped: the fuzzers see Ethernet frames).

Input formats (see the targets' doc comments):
  quic_lb   a configuration byte, a nonce-length byte, then the bytes the
            target encodes and decodes
  parse     one frame
  pipeline  a configuration byte (headroom, snapshot) then one frame
  burst     a configuration byte then frames, each a big-endian u16 length
            and its bytes
  handoff   a conntrack hand-off file's bytes
"""

import argparse
import pathlib
import struct
import zlib

# `pipeline`: headroom 127, normal MTU (bit 7 clear).
PIPELINE_CFG = 0x7F
# `burst`: two workers (bit 1), normal MTU, default headroom.
BURST_TWO_WORKERS = 0x02
BURST_SMALL_MTU = 0x01
FRAMES_PER_PCAP = 64
MAX_BURST = 64


def pcap_frames(path, limit):
    """The Ethernet frames of a classic pcap file (none for anything else)."""
    data = path.read_bytes()
    if len(data) < 24:
        return []
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        return []
    linktype = struct.unpack(endian + "I", data[20:24])[0] & 0x0FFFFFFF
    if linktype != 1:
        return []
    frames, off = [], 24
    while off + 16 <= len(data) and len(frames) < limit:
        incl = struct.unpack(endian + "I", data[off + 8 : off + 12])[0]
        off += 16
        frame = data[off : off + incl]
        off += incl
        if frame:
            frames.append(frame[:65535])
    return frames


def quic_payloads():
    """QUIC packets for the fuzzed QUIC-LB services: a short header whose
    connection ID names server 0x01 under config 0, a Handshake with the
    same ID, an Initial, and an ID with config bits 0b111."""
    cid = bytes([0x05, 0x01, 0xA1, 0xA2, 0xA3, 0xA4])
    long = lambda first, dcid: bytes([first]) + (1).to_bytes(4, "big") + bytes([len(dcid)]) + dcid + bytes(8) + bytes(32)
    return {
        "quic-short": bytes([0x41]) + cid + bytes(24),
        "quic-handshake": long(0xE0, cid),
        "quic-initial": long(0xC0, cid),
        "quic-unroutable": bytes([0x41, 0xE5]) + cid[1:] + bytes(24),
    }


def udp_frame(payload):
    """An Ethernet/IPv4/UDP frame from 192.0.2.7:40000 to 10.0.0.1:443
    (checksums left zero: the pipeline does not check them)."""
    udp = struct.pack(">HHHH", 40000, 443, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, bytes([192, 0, 2, 7]), bytes([10, 0, 0, 1]))
    eth = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 9]) + b"\x08\x00"
    return eth + ip + udp


def burst(cfg, frames):
    out = bytearray([cfg])
    for f in frames[:MAX_BURST]:
        out += struct.pack(">H", len(f)) + f
    return bytes(out)


def handoff_file(backends=2, connections=3):
    """A valid conntrack hand-off file (sluice_core::handoff, version 1):
    service "web", `backends` IPv4 backends (the second draining, no
    MAC), `connections` TCP 5-tuple entries alternating between them."""
    def text(t):
        b = t.encode()
        return struct.pack("<H", len(b)) + b
    out = b"SLUICE-HANDOFF\0\0" + struct.pack("<IQ", 1, 1_765_000_000_000)
    out += text("seed") + text("/etc/sluice/sluice.toml")
    out += struct.pack("<I", 1) + text("web")
    out += struct.pack("<I", backends)
    for i in range(backends):
        addr = bytes(10) + b"\xff\xff" + bytes([192, 0, 2, 10 + i])
        draining = 30_000 if i == 1 else 0
        mac = (1, bytes([2, 0, 0, 0, 0, 0x10 + i])) if i == 0 else (0, bytes(6))
        out += struct.pack("<IB", 0, 4) + addr + struct.pack("<BHIHB", 1, 1, draining, 0, mac[0]) + mac[1]
    out += struct.pack("<Q", connections)
    for i in range(connections):
        meta = (2 << 40) | (6 << 32) | ((40_000 + i) << 16) | 80
        out += struct.pack("<5Q", 0, 0x0a000001 + i, 0, 0xcb00710a, meta)
        out += struct.pack("<IIIIB", 0, i % max(backends, 1), 1000 * i, 600_000, 2)
    return out + struct.pack("<I", zlib.crc32(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--seeds", type=pathlib.Path, default=pathlib.Path("fuzz/seeds"))
    ap.add_argument("--pcaps", type=pathlib.Path, action="append", default=[])
    args = ap.parse_args()

    seeds = {"parse": {}, "pipeline": {}, "burst": {}, "quic_lb": {}, "handoff": {}}
    normal, small = [], []
    for p in sorted((args.seeds / "malformed").glob("*")):
        frame = p.read_bytes()
        seeds["parse"][p.stem] = frame
        seeds["pipeline"][p.stem] = bytes([PIPELINE_CFG]) + frame
        normal.append(frame)
    for p in sorted((args.seeds / "pipeline").glob("*")):
        data = p.read_bytes()
        if not data:
            continue
        seeds["pipeline"][p.stem] = data
        seeds["parse"][p.stem] = data[1:]
        small_mtu = data[0] >> 7
        (small if small_mtu else normal).append(data[1:])
        # Each frame alone, and twice in a row (a flow's second packet meets
        # the entry its first made, within the burst).
        cfg = BURST_TWO_WORKERS | small_mtu
        seeds["burst"][p.stem] = burst(cfg, [data[1:]])
        seeds["burst"][p.stem + "-twice"] = burst(cfg, [data[1:], data[1:]])
    seeds["burst"]["all-normal-mtu"] = burst(BURST_TWO_WORKERS, normal)
    seeds["burst"]["all-small-mtu"] = burst(BURST_TWO_WORKERS | BURST_SMALL_MTU, small)
    seeds["burst"]["all-one-worker"] = burst(0, normal)

    # QUIC to the fuzzed snapshot's GRE VIP (10.0.0.1, config 0 in the
    # clear: first octet, server ID 0x01, nonce) and its decoder target.
    for name, payload in quic_payloads().items():
        frame = udp_frame(payload)
        seeds["pipeline"][name] = bytes([PIPELINE_CFG]) + frame
        normal.append(frame)
        seeds["quic_lb"][name] = bytes([0x00, 0x00]) + payload
    seeds["burst"]["quic-all"] = burst(BURST_TWO_WORKERS, [udp_frame(p) for p in quic_payloads().values()])

    seeds["handoff"]["two-backends-three-connections"] = handoff_file()
    seeds["handoff"]["empty"] = handoff_file(backends=0, connections=0)

    for d in args.pcaps:
        for p in sorted(d.glob("*.pcap")):
            frames = pcap_frames(p, FRAMES_PER_PCAP)
            if not frames:
                continue
            name = "pcap-" + p.stem
            seeds["burst"][name] = burst(BURST_TWO_WORKERS, frames)
            for i, f in enumerate(frames):
                seeds["parse"][f"{name}-{i}"] = f
                seeds["pipeline"][f"{name}-{i}"] = bytes([PIPELINE_CFG]) + f

    for target, files in seeds.items():
        d = args.out / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (d / f"{name}.bin").write_bytes(data)
        print(f"fuzz-seeds: {target}: {len(files)} seeds")


if __name__ == "__main__":
    main()
