#!/usr/bin/env python3
"""QD1 4 KiB reads from QEMU's NBD client (`qemu-img bench`) with and without NBD extended
headers. QEMU 10 asks for them and has no switch to stop, so "without" is a tiervisor built
before they were offered (it refuses the option and QEMU falls back to structured replies):
pass that binary as --old. Same volume, same data, same client; the runs alternate between
the two servers. Prints microseconds per read (median of --reps) and new/old.

Per request the wire difference is small: a 32-byte request instead of 28, a 40-byte read
reply header (extended chunk + data offset) instead of 28.

Usage: bench/nbd_exthdr.py --old OLD_TIERVISOR [--new NEW_TIERVISOR] [--reps 5]
       [--count 20000] [--workdir /tmp/tv-bench-exthdr]
(--new defaults to $TIERVISOR_BIN or target/release/tiervisor.)
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd_peers  # noqa: E402

VOLUME = """[[pool]]
name = "data"
path = "data.pool"
size = "256m"
kind = "ssd"

[[volume]]
name = "vm1"
size = "64m"
pool = "data"
provisioning = "thin"
"""


def start(binary, d):
    """Serve a 64 MiB volume with `binary`, filled with data (every read touches it)."""
    os.environ["TIERVISOR_BIN"] = binary
    p, port = nbd_peers.serve_config(d, VOLUME)
    uri = f"nbd://127.0.0.1:{port}/vm1"
    subprocess.run(["qemu-io", "-f", "raw", "-c", "write -P 0x5a 0 64M", uri],
                   check=True, capture_output=True)
    return p, uri


def negotiated_extended(uri):
    out = subprocess.run(["qemu-io", "--trace", "nbd_*", "-f", "raw", "-c", "read 0 4k", uri],
                         check=True, capture_output=True, text=True)
    return "option reply 11 (extended headers), type 1 (ack)" in out.stdout + out.stderr


def bench_us(uri, count):
    """Microseconds per 4 KiB read at depth 1 (`qemu-img bench` walks the volume)."""
    out = subprocess.run(["qemu-img", "bench", "-f", "raw", "-c", str(count), "-d", "1",
                          "-s", "4096", uri], check=True, capture_output=True, text=True).stdout
    m = re.search(r"Run completed in ([0-9.]+) seconds", out)
    if not m:
        raise SystemExit(f"qemu-img bench said: {out}")
    return float(m.group(1)) / count * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True, help="tiervisor without extended headers")
    ap.add_argument("--new", default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--workdir", default="/tmp/tv-bench-exthdr")
    a = ap.parse_args()
    new = a.new or os.environ.get("TIERVISOR_BIN") or nbd_peers.tiervisor_bin()
    for tool in ["qemu-io", "qemu-img"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing (apt-get install qemu-utils)")
    binaries = {"extended": new, "structured": a.old}
    us = {k: [] for k in binaries}
    try:
        for rep in range(a.reps):
            # Alternate which goes first, so drift in the machine's load hits both.
            order = list(binaries) if rep % 2 == 0 else list(reversed(binaries))
            for name in order:
                d = os.path.join(a.workdir, name)
                p, uri = start(binaries[name], d)
                try:
                    ext = negotiated_extended(uri)
                    if ext != (name == "extended"):
                        raise SystemExit(f"{binaries[name]}: extended headers negotiated: {ext}")
                    us[name].append(bench_us(uri, a.count))
                    print(f"rep {rep} {name:10} {us[name][-1]:7.1f} us/read", file=sys.stderr)
                finally:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=60)
    finally:
        shutil.rmtree(a.workdir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in us.items()}
    print(f"\n{'framing':12} {'us/read (median)':>17} {'min':>7} {'max':>7}")
    for k, v in us.items():
        print(f"{k:12} {med[k]:17.1f} {min(v):7.1f} {max(v):7.1f}")
    print(f"extended/structured: {med['extended'] / med['structured']:.3f}")


if __name__ == "__main__":
    main()
