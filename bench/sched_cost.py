#!/usr/bin/env python3
"""CPU cost of each scheduler per dispatch at queue depths 32 and 256: builds and runs
crates/engine/examples/sched_cost.rs (steady state: each step adds one request, dispatches
one and completes it; median ns per step over --reps runs of --steps steps).

Usage: bench/sched_cost.py [--reps 5] [--steps 200000]
"""

import argparse
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200000)
    a = ap.parse_args()
    subprocess.run(
        ["cargo", "run", "--release", "-q", "-p", "tiervisor-engine", "--example", "sched_cost", "--",
         "--reps", str(a.reps), "--steps", str(a.steps)],
        cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
