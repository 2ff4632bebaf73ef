#!/usr/bin/env python3
"""QoS across shards through `serve` (issue 12): two volumes of one mClock pool, `light`
(weight 1) and `heavy` (weight 9), each read by fio through NBD (4 KiB random reads, QD8),
on a server with one shard (both volumes under one scheduler) and with two (`--threads 2`,
a volume on each), the latter with `shard_qos = "pool"` (the default: the front's broker
gives each shard a share of the pool's device and gates the smaller one) and with
`"local"` (each shard orders only its own volume). The pool is a page-cached file at
queue depth 1, so the scheduler decides every dispatch (no throttle: each shard would
model its own copy of the disk). The server runs on CPU 0, fio on CPU 1. Prints per
configuration the medians of light's and heavy's IOPS, heavy:light and its ratio to the
one-shard server's, and the pool's total beside the one-shard server's.

Usage: bench/qos_shards.py [--runtime 8] [--reps 3] [--workdir /tmp/qos-shards]
       [--json out.json]
(TIERVISOR_BIN picks the binary; default target/release/tiervisor.)
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_peers import fio_randread_iops, serve_config  # noqa: E402

CONFIGS = [("1 shard", 1, "pool"), ("2 shards, pool", 2, "pool"), ("2 shards, local", 2, "local")]


def serve(d, threads, qos):
    # The server on CPU 0, fio on CPU 1 (`run_fio`).
    return serve_config(d, f"""threads = {threads}
shard_qos = "{qos}"
[[pool]]
name = "disk"
path = "disk.pool"
size = "3g"
kind = "hdd"
queue_depth = 1
scheduler = "mclock"
[[volume]]
name = "light"
size = "1g"
pool = "disk"
provisioning = "thick"
weight = 1
[[volume]]
name = "heavy"
size = "1g"
pool = "disk"
provisioning = "thick"
weight = 9
""", log=True, cpus="0")


def run_fio(port, runtime):
    return fio_randread_iops(port, ["light", "heavy"], runtime, cpus="1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/qos-shards")
    ap.add_argument("--json")
    a = ap.parse_args()
    for tool in ["fio", "taskset"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing")
    os.makedirs(a.workdir, exist_ok=True)
    runs = {name: [] for name, _, _ in CONFIGS}
    # Each repetition runs every configuration in turn, so load from elsewhere falls on all.
    for _ in range(a.reps):
        for name, threads, qos in CONFIGS:
            d = os.path.join(a.workdir, "tv")
            p, port = serve(d, threads, qos)
            try:
                r = run_fio(port, a.runtime)
            finally:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=300)
                shutil.rmtree(d, ignore_errors=True)
            runs[name].append(r)
            print(f"  {name}: light {r['light']:.0f}, heavy {r['heavy']:.0f}", file=sys.stderr)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in ["light", "heavy"]}
           for n, rs in runs.items()}
    base = med["1 shard"]
    base_ratio = base["heavy"] / base["light"]
    base_total = base["heavy"] + base["light"]
    print(f"medians of {a.reps} runs of {a.runtime} s; server on CPU 0, fio on CPU 1;"
          " mclock pool file at queue depth 1, weights light 1, heavy 9")
    print(f"{'':18} {'light IOPS':>11} {'heavy IOPS':>11} {'heavy:light':>12}"
          f" {'of 1 shard':>11} {'total':>9} {'of 1 shard':>11}")
    for name, _, _ in CONFIGS:
        m = med[name]
        ratio = m["heavy"] / m["light"]
        total = m["heavy"] + m["light"]
        print(f"{name:18} {m['light']:11.0f} {m['heavy']:11.0f} {ratio:12.2f}"
              f" {ratio / base_ratio:11.2f} {total:9.0f} {total / base_total:11.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"median": med, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
