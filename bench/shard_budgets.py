#!/usr/bin/env python3
"""Issue 18: budgets that follow demand across shards. One busy volume beside an idle one
on one throttled HDD pool (`throttle = { model = "cheetah-15k4", k = 1 }` on a page-cached file, so a write
that misses the write buffer costs a modelled disk's service time) with a 32 MiB write
buffer: fio's nbd engine writes a burst of --burst MiB of 4 KiB random blocks at queue
depth 32 to `vm1`; `vm2` gets nothing. Servers, all up at once, runs interleaved (rep 1
of each, then rep 2 of each):
  tv-1shard        --threads 1: the whole buffer is the busy volume's
  tv-2shard-fixed  --threads 2, shard_budgets = "fixed": 16 MiB each shard
  tv-2shard-demand --threads 2, shard_budgets = "demand": the idle shard keeps 4 MiB, the busy one 28
Prints per server: the burst's write IOPS, its time, p99, and the budget changes `ctl
stat` counted (median of --reps; ratio to tv-2shard-fixed).

Usage: bench/shard_budgets.py [--reps 3] [--burst 24] [--server-cpus 0] [--client-cpus 1]
       [--workdir /tmp/tv-budget-bench]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd_peers as peers  # noqa: E402

SERVERS = [("tv-1shard", 1, "fixed"), ("tv-2shard-fixed", 2, "fixed"), ("tv-2shard-demand", 2, "demand")]


def start(work, name, threads, budgets, cpus):
    d = os.path.join(work, name)
    p, port = peers.serve_config(d, f"""threads = {threads}
shard_budgets = "{budgets}"
[[pool]]
name = "data"
path = "data.pool"
size = "2g"
kind = "hdd"
throttle = {{ model = "cheetah-15k4", k = 1, adapt = false }}
write_buffer = "32m"
[[volume]]
name = "vm1"
size = "512m"
pool = "data"
provisioning = "thick"
[[volume]]
name = "vm2"
size = "512m"
pool = "data"
provisioning = "thick"
""", log=True)
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(p.pid)], check=True, capture_output=True)
    return p, d, f"nbd://127.0.0.1:{port}/vm1"


def budget_changes(d):
    out = subprocess.run([peers.tiervisor_bin(), "ctl", "stat", "--json", "--data-dir", d],
                         capture_output=True, text=True, check=True).stdout
    return sum(s.get("budget_commands", 0) for s in json.loads(out)["server"]["shards"])


def settle(d, timeout=120):
    """Wait until the server's write buffer has drained (the next burst starts empty)."""
    t = time.time() + timeout
    while time.time() < t:
        out = subprocess.run([peers.tiervisor_bin(), "ctl", "stat", "--json", "--data-dir", d],
                             capture_output=True, text=True, check=True).stdout
        pools = json.loads(out)["engine"]["pools"]
        wb = pools[0].get("write_buffer") or {}
        held = wb.get("absorbed_bytes", 0) - wb.get("written_back_bytes", 0) - wb.get("superseded_bytes", 0)
        if held <= 0:
            return
        time.sleep(0.2)


def run_fio(uri, burst_mib, cpus, fio_dir, seed):
    cmd = ["taskset", "-c", cpus, "fio", "--ioengine=nbd", "--rw=randwrite", "--bs=4k", "--iodepth=32",
           "--size=512m", f"--io_size={burst_mib}m", f"--randseed={seed}", "--output-format=json",
           f"--aux-path={fio_dir}", "--name=busy", f"--uri={uri}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=fio_dir).stdout
    j = json.loads(out[out.index("{"):])["jobs"][0]["write"]
    return {"iops": j["iops"], "time_s": j["runtime"] / 1000.0,
            "p99_us": j["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--burst", type=int, default=24, help="MiB written per run")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--workdir", default="/tmp/tv-budget-bench")
    a = ap.parse_args()
    for tool in ["fio", "taskset"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing (apt-get install fio util-linux)")
    fio_dir = tempfile.mkdtemp(prefix="tv-fio-")
    started = []
    try:
        for name, threads, budgets in SERVERS:
            p, d, uri = start(a.workdir, name, threads, budgets, a.server_cpus)
            started.append((name, p, d, uri))
        runs = {name: [] for name, _, _, _ in started}
        for rep in range(a.reps):
            for name, _, d, uri in started:
                settle(d)
                r = run_fio(uri, a.burst, a.client_cpus, fio_dir, rep + 1)
                r["budget_changes"] = budget_changes(d)
                runs[name].append(r)
                print(f"rep {rep + 1} {name:17} {r['iops']:9.0f} IOPS {r['time_s']:7.2f} s "
                      f"p99 {r['p99_us']:10.1f} us", file=sys.stderr)
    finally:
        for _, p, _, _ in started:
            p.send_signal(signal.SIGTERM)
        for _, p, d, _ in started:
            p.wait(timeout=120)
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(fio_dir, ignore_errors=True)
    med = {n: {m: statistics.median(x[m] for x in rs) for m in rs[0]} for n, rs in runs.items()}
    ref = med["tv-2shard-fixed"]
    print(f"\n{a.burst} MiB burst of 4 KiB random writes, QD32, vm1 busy, vm2 idle "
          f"(median of {a.reps}; ratio to tv-2shard-fixed)")
    print(f"{'server':17} {'IOPS':>9} {'time s':>8} {'p99 us':>10} {'budget chg':>10}   IOPS ratio")
    for n, r in med.items():
        print(f"{n:17} {r['iops']:9.0f} {r['time_s']:8.2f} {r['p99_us']:10.1f} "
              f"{r['budget_changes']:10.0f}   {r['iops'] / ref['iops']:.2f}x")


if __name__ == "__main__":
    main()
