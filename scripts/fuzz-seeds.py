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
"""

import argparse
import pathlib
import struct

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--seeds", type=pathlib.Path, default=pathlib.Path("fuzz/seeds"))
    ap.add_argument("--pcaps", type=pathlib.Path, action="append", default=[])
    args = ap.parse_args()

    seeds = {"parse": {}, "pipeline": {}, "burst": {}, "quic_lb": {}}
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
