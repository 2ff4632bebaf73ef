#!/usr/bin/env python3
"""Simulator speed: replay wsrch-small repeated to 1,015,078 requests (its three busy ASUs
as three VMs, 41 passes each) on the HDD and the SSD preset; report simulated I/Os per
wall-clock second, median of --reps runs, both the engine's own wall time (the run loop)
and the whole process (parse, load, set up, run, report), and per CPU second of the whole
process (user + system time of the child: on a shared, loaded machine wall time mostly
measures the other load, CPU time much less so).

Usage: bench/sim_speed.py [--reps 5] [--bin A --bin B ...]

With several --bin, the binaries run alternately (one run of each per repetition, so
machine noise falls on all alike) and each device's line says its ratio to the first.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--bin", action="append", help="a tiervisor binary (repeatable; default: build --release)")
    a = ap.parse_args()
    binaries = a.bin
    if not binaries:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "tiervisor"], cwd=ROOT, check=True)
        binaries = [os.path.join(ROOT, "target", "release", "tiervisor")]
    print(f"{'device':6} {'binary':24} {'requests':>9} {'run loop I/O/s':>15} {'whole process I/O/s':>20} {'whole process s':>16} {'I/O per CPU s':>14} {'CPU s':>7} {'ratio':>6} {'CPU ratio':>9}")
    for dev in ["hdd", "ssd"]:
        sc = os.path.join(ROOT, "scenarios", "bench", f"wsrch-1m-{dev}.toml")
        loop = {b: [] for b in binaries}
        whole = {b: [] for b in binaries}
        cpu = {b: [] for b in binaries}
        n = 0
        for _ in range(a.reps):
            for b in binaries:
                t = time.perf_counter()
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                out = subprocess.run([b, "sim", "--json", sc], capture_output=True, text=True, check=True).stdout
                elapsed = time.perf_counter() - t
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[b].append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
                r = json.loads(out)
                n = r["ios"]
                loop[b].append(r["ios"] / r["wall_time_s"])
                whole[b].append(elapsed)
        base = statistics.median(loop[binaries[0]])
        base_cpu = statistics.median(cpu[binaries[0]])
        for b in binaries:
            w = statistics.median(whole[b])
            lp = statistics.median(loop[b])
            c = statistics.median(cpu[b])
            # CPU ratio: the first binary's CPU time over this one's (above 1: faster).
            print(f"{dev:6} {os.path.basename(b)[:24]:24} {n:9d} {lp:15.0f} {n / w:20.0f} {w:16.3f} {n / c:14.0f} {c:7.3f} {lp / base:6.2f} {base_cpu / c:9.2f}")


if __name__ == "__main__":
    main()
