#!/usr/bin/env python3
"""Host-level flush isolation in `tiervisor serve` (issue 14, seed 001 one level up).

Part 1, two volumes on one pool file, driven at once through NBD by fio:
  VM1: 4 KiB random writes, QD4, never syncs (its bandwidth is what a noisy neighbour's
       fsyncs cost it);
  VM2: 4 KiB random writes, QD1, an NBD FLUSH after every 4 writes (its flush latency).
  Each under three pool settings: the page cache (`direct = false`, today's behaviour and
  the baseline: a FLUSH is an fdatasync of the whole pool file), `direct = true` without a
  buffer, and `direct = true` with `write_buffer = "256m"` (a FLUSH writes back only its
  own volume's buffered data).
Part 2, a single volume, 4 KiB random writes and random reads at QD1 and QD32 without
  syncs: tiervisor with the page cache, with O_DIRECT, with O_DIRECT and the buffer, and
  `qemu-nbd --cache=none --aio=native` serving a raw file on the same file system. Before
  the reads the whole 1 GiB is written once (1 MiB sequential writes), so reads return
  data rather than holes; on the page-cache pool it is then in the host's RAM.

Prints medians of --reps runs. The pools and the raw file live under --workdir (it must not
be tmpfs: O_DIRECT).

With the buffer, the pool's write-buffer counters (`ctl stat`) are printed too: FLUSHes,
operations queued ahead of each, and how long they waited for their write-backs.

Usage: bench/flush_isolation.py [--reps 3] [--runtime 5] [--workdir /tmp/tv-flush-bench] [--json out.json]
                                [--settings page-cache,direct,direct+buffer] [--two-vms-only | --single-only]
"""

import argparse
import atexit
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_peers import free_port, tiervisor_bin, wait_port  # noqa: E402

FIO_DIR = tempfile.mkdtemp(prefix="tv-fio-")
atexit.register(shutil.rmtree, FIO_DIR, True)

SETTINGS = [
    ("page-cache", "direct = false"),
    ("direct", "direct = true"),
    ("direct+buffer", 'direct = true\nwrite_buffer = "256m"'),
]


def serve(d, pool_keys, volumes):
    """`tiervisor serve` in a fresh `d`: one SSD pool file with `pool_keys`, thick 1 GiB
    volumes named in `volumes`. Returns (process, port)."""
    port = free_port()
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = os.path.join(d, "bench.toml")
    vols = "".join(f'[[volume]]\nname = "{v}"\nsize = "1g"\npool = "data"\nprovisioning = "thick"\n' for v in volumes)
    with open(cfg, "w") as f:
        f.write(f"""data_dir = "{d}"
listen = "127.0.0.1:{port}"
unix_socket = ""
admin_socket = "admin.sock"
[[pool]]
name = "data"
path = "data.pool"
size = "{len(volumes) + 1}g"
kind = "ssd"
{pool_keys}
{vols}""")
    log = open(os.path.join(d, "serve.log"), "w")
    p = subprocess.Popen([tiervisor_bin(), "serve", "--config", cfg, "--format-new"], stdout=subprocess.DEVNULL, stderr=log)
    wait_port(port)
    return p, port


def wbuf_counters(d):
    """The pool's write-buffer counters from `ctl stat` (cumulative since the server
    started), or None for a pool without a buffer."""
    out = subprocess.run([tiervisor_bin(), "ctl", "stat", "--json", "--data-dir", d],
                         capture_output=True, text=True, check=True).stdout
    wb = json.loads(out)["engine"]["pools"][0].get("write_buffer")
    if not wb:
        return None
    n = max(wb["flushes"], 1)
    return {
        "flushes": wb["flushes"],
        "queued_ahead_per_flush": wb["queued_ahead_of_flushes"] / n,
        "flush_writeback_wait_mean_us": wb["flush_wait_total_ns"] / n / 1000.0,
        "flush_writeback_wait_max_us": wb["flush_wait_max_ns"] / 1000.0,
        "background_share": wb["background_bytes"] / max(wb["written_back_bytes"], 1),
    }


def flush_breakdown(d):
    """Where VM2's FLUSHes spent their time, from `ctl stat` (cumulative since the server
    started): the engine's FLUSH latency (arrival to reply, without NBD and fio), its commit
    rounds (a FLUSH of a thick volume is one round: write back its buffered data, then one
    device flush of the pool file), and, with the buffer, the wait for the write-backs.
    The device flush is the round less that wait."""
    out = subprocess.run([tiervisor_bin(), "ctl", "stat", "--json", "--data-dir", d],
                         capture_output=True, text=True, check=True).stdout
    eng = json.loads(out)["engine"]
    vm2 = next(v for v in eng["volumes"] if v["name"] == "vm2")
    lat = vm2["flush"]["latency"]
    h = vm2["commit_histogram"]
    commit_mean_us = 1e6 * h["sum_seconds"] / max(h["count"], 1)
    wb = eng["pools"][0].get("write_buffer")
    wait_us = wb["flush_wait_total_ns"] / max(wb["flushes"], 1) / 1000.0 if wb else 0.0
    return {
        "engine_flush_p50_us": lat["p50_us"],
        "engine_flush_mean_us": lat["mean_us"],
        "commit_rounds": h["count"],
        "commit_mean_us": commit_mean_us,
        "writeback_wait_mean_us": wait_us,
        "device_flush_mean_us": commit_mean_us - wait_us,
    }


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def fio_json(args):
    cmd = ["fio", "--output-format=json", f"--aux-path={FIO_DIR}"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=FIO_DIR).stdout
    return json.loads(out[out.index("{"):])["jobs"]


def common(runtime):
    return ["--ioengine=nbd", "--rw=randwrite", "--bs=4k", "--size=1g", "--time_based",
            f"--runtime={runtime}", "--ramp_time=1", "--randrepeat=1"]


def two_vms(port, runtime):
    jobs = fio_json(common(runtime) + [
        "--name=vm1", f"--uri=nbd://127.0.0.1:{port}/vm1", "--iodepth=4",
        "--name=vm2", f"--uri=nbd://127.0.0.1:{port}/vm2", "--iodepth=1", "--fsync=4",
    ])
    vm1 = next(j for j in jobs if j["jobname"] == "vm1")
    vm2 = next(j for j in jobs if j["jobname"] == "vm2")
    pct = vm2["sync"]["lat_ns"].get("percentile", {})
    return {
        "vm1_mb_s": vm1["write"]["bw_bytes"] / 1e6,
        "vm2_mb_s": vm2["write"]["bw_bytes"] / 1e6,
        "vm2_flush_p50_us": pct.get("50.000000", 0) / 1000.0,
        "vm2_flush_p99_us": pct.get("99.000000", 0) / 1000.0,
    }


SINGLE = [("randwrite", 1), ("randwrite", 32), ("randread", 1), ("randread", 32)]


def single(uri, rw, qd, runtime):
    args = common(runtime) + ["--name=one", f"--uri={uri}", f"--iodepth={qd}"]
    args = [f"--rw={rw}" if a.startswith("--rw=") else a for a in args]
    j = fio_json(args)[0]["read" if rw == "randread" else "write"]
    return {"iops": j["iops"], "p99_us": j["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000.0}


def fill(uri):
    """Write the whole volume once, so random reads find data."""
    fio_json(["--ioengine=nbd", "--rw=write", "--bs=1m", "--size=1g", "--iodepth=8",
              "--name=fill", f"--uri={uri}"])


def single_all(uri, reps, runtime):
    """Median of `reps` runs of each of SINGLE: {"randwrite QD1": {...}, ...}."""
    out = {}
    for rw, qd in SINGLE:
        if rw == "randread" and not any(k.startswith("randread") for k in out):
            fill(uri)
        out[f"{rw} QD{qd}"] = median([single(uri, rw, qd, runtime) for _ in range(reps)])
    return out


def median(runs):
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/tv-flush-bench")
    ap.add_argument("--json")
    ap.add_argument("--settings", default=",".join(n for n, _ in SETTINGS))
    ap.add_argument("--two-vms-only", action="store_true")
    ap.add_argument("--single-only", action="store_true")
    a = ap.parse_args()
    chosen = [(n, k) for n, k in SETTINGS if n in a.settings.split(",")]
    for tool in ["fio", "qemu-nbd"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing (apt-get install fio qemu-utils)")
    os.makedirs(a.workdir, exist_ok=True)
    results = {"two_vms": {}, "single": {}, "write_buffer": {}}
    for name, keys in ([] if a.single_only else chosen):
        d = os.path.join(a.workdir, "tv2")
        p, port = serve(d, keys, ["vm1", "vm2"])
        try:
            results["two_vms"][name] = median([two_vms(port, a.runtime) for _ in range(a.reps)])
            wb = wbuf_counters(d)
            if wb:
                results["write_buffer"][name] = wb
            results.setdefault("flush_breakdown", {})[name] = flush_breakdown(d)
        finally:
            stop(p)
        print(f"two VMs {name:14} {results['two_vms'][name]}", file=sys.stderr)
    if a.two_vms_only:
        for name, r in results["two_vms"].items():
            print(f"{name:14} {r}")
        for name, wb in results["write_buffer"].items():
            print(f"{name:14} {wb}")
        print_breakdown(results)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=2)
        return
    for name, keys in chosen:
        d = os.path.join(a.workdir, "tv1")
        p, port = serve(d, keys, ["vm1"])
        try:
            results["single"][name] = single_all(f"nbd://127.0.0.1:{port}/vm1", a.reps, a.runtime)
        finally:
            stop(p)
            shutil.rmtree(d, ignore_errors=True)
        print(f"single {name:14} {results['single'][name]}", file=sys.stderr)
    raw = os.path.join(a.workdir, "qemu.raw")
    with open(raw, "wb") as f:
        f.truncate(1 << 30)
    port = free_port()
    q = subprocess.Popen(["qemu-nbd", "-f", "raw", "-x", "vm1", "-t", "--cache=none", "--aio=native",
                          "-b", "127.0.0.1", "-p", str(port), raw], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    try:
        results["single"]["qemu-nbd"] = single_all(f"nbd://127.0.0.1:{port}/vm1", a.reps, a.runtime)
    finally:
        q.send_signal(signal.SIGTERM)
        q.wait(timeout=60)
    os.remove(raw)
    shutil.rmtree(os.path.join(a.workdir, "tv2"), ignore_errors=True)

    peer = results["single"]["qemu-nbd"]
    print(f"\n{'single volume':14} " + " ".join(f"{k:>22}" for k in peer)
          + "   (IOPS / p99 us / vs qemu-nbd --cache=none --aio=native)")
    for name in [s for s, _ in chosen] + ["qemu-nbd"]:
        r = results["single"][name]
        print(f"{name:14} " + " ".join(
            f"{r[k]['iops']:8.0f}/{r[k]['p99_us']:6.0f}/{r[k]['iops'] / peer[k]['iops']:5.2f}" for k in peer))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    if a.single_only:
        return

    base = results["two_vms"].get("page-cache") or next(iter(results["two_vms"].values()))
    print(f"\n{'pool':14} {'VM1 MB/s':>9} {'VM2 MB/s':>9} {'VM2 flush p50 us':>17} {'p99 us':>9}   VM1 vs page-cache, VM2 p50 vs page-cache")
    for name, _ in chosen:
        r = results["two_vms"][name]
        print(f"{name:14} {r['vm1_mb_s']:9.1f} {r['vm2_mb_s']:9.1f} {r['vm2_flush_p50_us']:17.0f} {r['vm2_flush_p99_us']:9.0f}"
              f"   {r['vm1_mb_s'] / base['vm1_mb_s']:.2f}  {r['vm2_flush_p50_us'] / max(base['vm2_flush_p50_us'], 1e-9):.2f}")
    for name, wb in results["write_buffer"].items():
        print(f"\n{name}: {wb['flushes']} FLUSHes on the pool, {wb['queued_ahead_per_flush']:.1f} operations queued ahead of each,"
              f" write-back wait mean {wb['flush_writeback_wait_mean_us']:.0f} us, max {wb['flush_writeback_wait_max_us']:.0f} us;"
              f" {100 * wb['background_share']:.0f} % of written-back bytes in the background")
    print_breakdown(results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


def print_breakdown(results):
    print(f"\n{'VM2 FLUSH':14} {'fio p50 us':>10} {'engine p50':>10} {'engine mean':>11} {'commit mean':>11}"
          f" {'write-back wait':>15} {'device flush':>12}   (means over all reps; us)")
    for name, b in results.get("flush_breakdown", {}).items():
        fio_p50 = results["two_vms"][name]["vm2_flush_p50_us"]
        print(f"{name:14} {fio_p50:10.0f} {b['engine_flush_p50_us']:10.0f} {b['engine_flush_mean_us']:11.0f}"
              f" {b['commit_mean_us']:11.0f} {b['writeback_wait_mean_us']:15.0f} {b['device_flush_mean_us']:12.0f}")


if __name__ == "__main__":
    main()
