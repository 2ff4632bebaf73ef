#!/usr/bin/env python3
"""Simulator speed: replay wsrch-small repeated to 1,015,078 requests (its three busy ASUs
as three VMs, 41 passes each) on the HDD and the SSD preset; report simulated I/Os per
wall-clock second, median of --reps runs, both the engine's own wall time (the run loop)
and the whole process (parse, load, set up, run, report).

Usage: bench/sim_speed.py [--reps 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "tiervisor"], cwd=ROOT, check=True)
    binary = os.path.join(ROOT, "target", "release", "tiervisor")
    print(f"{'device':6} {'requests':>9} {'run loop I/O/s':>15} {'whole process I/O/s':>20} {'whole process s':>16}")
    for dev in ["hdd", "ssd"]:
        sc = os.path.join(ROOT, "scenarios", "bench", f"wsrch-1m-{dev}.toml")
        loop, whole = [], []
        for _ in range(a.reps):
            t = time.perf_counter()
            out = subprocess.run([binary, "sim", "--json", sc], capture_output=True, text=True, check=True).stdout
            elapsed = time.perf_counter() - t
            r = json.loads(out)
            loop.append(r["ios"] / r["wall_time_s"])
            whole.append(elapsed)
        n = r["ios"]
        w = statistics.median(whole)
        print(f"{dev:6} {n:9d} {statistics.median(loop):15.0f} {n / w:20.0f} {w:16.3f}")


if __name__ == "__main__":
    main()
