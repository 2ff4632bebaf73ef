#!/usr/bin/env python3
"""Tiering through `tiervisor serve` (issue 17): fio `random_distribution=zipf:1.1` over a
volume twice the size of its SSD share, `hot` against `split`, with HDD-only and SSD-only
(`pinned`) as the bounds, and the `cache` placement (the SSD as a write-back cache of the
HDD, as an operator would deploy dm-cache or bcache instead of tiering) with its `smq` and
`bcache` policies, the same SSD share as `hot`.

Each placement gets its own server per repetition, on two pool files in a temp dir:
  "ssd": a pool file served through the host page cache, no throttle (so on this machine
         it runs at RAM speed, faster than a real SSD);
  "hdd": a pool file held to the virtual performance throttle, `cheetah-15k4` at k = 1
         (seed 003's fit of a 15k RPM drive: 4.25 + 5.25 d/D ms per operation, 0.25 ms on a
         predicted drive-cache hit), queue depth 1 (the hdd default). The machine has no HDD;
         this is the "HDD": the file's own speed never shows, completions are held to the model.
  Journals and metadata are on the ssd pool in every configuration.

Per placement and repetition:
  1. fill: the whole volume written once, 1 MiB sequential writes carrying fio's crc32c
     verify header every 4 KiB (so every block read later holds data, and can be checked);
  2. warm-up (--warmup s): the workload below, so `hot` can promote; not measured;
  3. measured run (--runtime s): fio randrw 70/30, 4 KiB, QD --iodepth,
     random_distribution=zipf:1.1, norandommap, writes carrying crc32c headers;
  4. idle (--idle s, default 35): no request; `ctl stat` after 3 s and at the end shows how
     many chunks a `cache` volume still has dirty (smq cleans after 1 s without I/O,
     bcache at its maximum rate after 30 s; docs/ARCHITECTURE.md, "Cache placement");
  5. verify pass: the whole volume read back sequentially, every 4 KiB block's header and
     crc32c checked (fio --verify=crc32c). fio cannot verify a mixed zipf run against its
     own write log (overwrites make it expect an older write's seed), so this checks that
     every block holds intact data that fio wrote at that offset, not that it is the newest
     write of that block. A failure stops the script.
`ctl stat --json` before and after the measured run gives the run's requests per pool
(foreground operations; one volume per server, so the pool's are the volume's), promotions
and demotions (for `cache`: fills and evictions), and for `cache` the writebacks and the
bytes they copied; after it, the volume's chunks per pool.

Prints medians over --reps of IOPS (read + write), p99 completion latency of reads and of
writes, the SSD pool's share of requests, promotions and demotions (warm-up and run), chunks
per pool, and for the "HDD" pool in the run: operations per second, the model's mean
service time and the share it served as drive-cache hits (throttle counters of `ctl stat`);
then the ratios hot/split and hot/SSD-only. Everything goes under --workdir
(deleted per server) and a temp dir for fio; nothing is written in the repository.

Usage: bench/tiering_serve.py [--reps 3] [--warmup 20] [--runtime 20] [--size-mib 256]
                              [--iodepth 16] [--idle 35] [--workdir /tmp/tv-tiering-bench] [--json out.json]
                              [--placements hdd-only,ssd-only,split,hot,cache,cache-bcache]
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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_peers import serve_config, tiervisor_bin  # noqa: E402

FIO_DIR = tempfile.mkdtemp(prefix="tv-fio-")
atexit.register(shutil.rmtree, FIO_DIR, True)

HDD_THROTTLE = '{ model = "cheetah-15k4", k = 1 }'


def volume_keys(placement, size_mib):
    """The [[volume]] keys of each configuration; `split`, `hot` and `cache` get half the
    volume on the SSD pool (the SSD share), HDD home."""
    half = size_mib // 2
    return {
        "hdd-only": 'pool = "hdd"\nplacement = "pinned"',
        "ssd-only": 'pool = "ssd"\nplacement = "pinned"',
        "split": 'pool = "hdd"\nplacement = "split"\nfast_pool = "ssd"\nfast_percent = 50',
        "hot": f'pool = "hdd"\nplacement = "hot"\nfast_pool = "ssd"\nfast_budget = "{half}m"',
        "cache": f'pool = "hdd"\nplacement = "cache"\ncache_policy = "smq"\nfast_pool = "ssd"\nfast_budget = "{half}m"',
        "cache-bcache": f'pool = "hdd"\nplacement = "cache"\ncache_policy = "bcache"\nfast_pool = "ssd"\n'
                        f'fast_budget = "{half}m"',
    }[placement]


def config(placement, size_mib):
    pool_mib = 2 * size_mib + 64  # room for a whole volume plus journals on either pool
    return f"""chunk = "1m"
metadata_pool = "ssd"

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "{pool_mib}m"
kind = "ssd"

[[pool]]
name = "hdd"
path = "hdd.pool"
size = "{pool_mib}m"
kind = "hdd"
throttle = {HDD_THROTTLE}

[[volume]]
name = "vm1"
size = "{size_mib}m"
{volume_keys(placement, size_mib)}
"""


def fio(args):
    cmd = ["fio", "--output-format=json", f"--aux-path={FIO_DIR}"] + args
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=FIO_DIR)
    if r.returncode != 0:
        raise SystemExit(f"fio failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]


def stat(d):
    out = subprocess.run([tiervisor_bin(), "ctl", "stat", "--json", "--data-dir", d],
                         capture_output=True, text=True, check=True).stdout
    eng = json.loads(out)["engine"]
    vol = eng["volumes"][0]
    ops = {p["name"]: p["io"]["foreground"]["read_ops"] + p["io"]["foreground"]["write_ops"] for p in eng["pools"]}
    thr = next(p["throttle"] for p in eng["pools"] if p["name"] == "hdd") or {}
    return {"ops": ops, "promotions": vol["promotions"], "demotions": vol["demotions"],
            "hdd_ops": thr.get("ops", 0), "hdd_hits": thr.get("cache_hits", 0),
            "hdd_service_ns": thr.get("model_service_ns", 0),
            "chunks": dict(vol["chunks_by_pool"]), "hottest": vol["monitor"]["hottest"],
            "cache": vol.get("cache") or {}}


def one(placement, a, rep):
    d = os.path.join(a.workdir, f"{placement}-{rep}")
    p, port = serve_config(d, config(placement, a.size_mib), log=True)
    uri = f"nbd://127.0.0.1:{port}/vm1"
    size = f"--size={a.size_mib}m"
    base = ["--name=j", "--ioengine=nbd", f"--uri={uri}", size]
    work = base + ["--rw=randrw", "--rwmixread=70", "--bs=4k", f"--iodepth={a.iodepth}",
                   "--random_distribution=zipf:1.1", "--norandommap", "--randrepeat=1",
                   "--verify=crc32c", "--do_verify=0", "--time_based"]
    try:
        fio(base + ["--rw=write", "--bs=1m", "--iodepth=4", "--verify=crc32c", "--verify_interval=4k",
                    "--do_verify=0"])
        s0 = stat(d)
        fio(work + [f"--runtime={a.warmup}"])
        s1 = stat(d)
        j = fio(work + [f"--runtime={a.runtime}"])
        s2 = stat(d)
        # Idle: no request for --idle s, so a cache's idle cleaning shows (smq cleans
        # after 1 s without I/O, bcache runs at its maximum rate after 30 s).
        time.sleep(min(3, a.idle))
        s3 = stat(d)
        time.sleep(max(0, a.idle - 3))
        s4 = stat(d)
        # Every 4 KiB block checked; 64 KiB reads keep the pass short on the "HDD".
        v = fio(base + ["--rw=read", "--bs=64k", "--iodepth=4", "--verify=crc32c", "--verify_interval=4k"])
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
        shutil.rmtree(d, ignore_errors=True)
    if v["error"] != 0 or v["read"]["io_bytes"] != a.size_mib << 20:
        raise SystemExit(f"{placement} rep {rep}: verify pass failed: error {v['error']}, read {v['read']['io_bytes']} bytes")
    run_ops = {k: s2["ops"][k] - s1["ops"][k] for k in s2["ops"]}
    pct = lambda ddir: j[ddir]["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000.0  # noqa: E731
    return {
        "iops": j["read"]["iops"] + j["write"]["iops"],
        "read_p99_us": pct("read"),
        "write_p99_us": pct("write"),
        "ssd_share": run_ops["ssd"] / max(sum(run_ops.values()), 1),
        "promotions_warmup": s1["promotions"] - s0["promotions"],
        "demotions_warmup": s1["demotions"] - s0["demotions"],
        "promotions_run": s2["promotions"] - s1["promotions"],
        "demotions_run": s2["demotions"] - s1["demotions"],
        # The "HDD" in the run: operations (migration included), the model's mean service
        # time, and the share the model served as drive-cache hits.
        "hdd_ops_per_s": (s2["hdd_ops"] - s1["hdd_ops"]) / a.runtime,
        "hdd_model_ms": (s2["hdd_service_ns"] - s1["hdd_service_ns"]) / 1e6 / max(s2["hdd_ops"] - s1["hdd_ops"], 1),
        "hdd_cache_hit_share": (s2["hdd_hits"] - s1["hdd_hits"]) / max(s2["hdd_ops"] - s1["hdd_ops"], 1),
        "chunks_ssd": s2["chunks"].get("ssd", 0),
        "chunks_hdd": s2["chunks"].get("hdd", 0),
        "verified_mib": v["read"]["io_bytes"] >> 20,
        # `cache` only (zero otherwise): writebacks in the run, their MiB, dirty chunks after.
        "writebacks_run": s2["cache"].get("writebacks", 0) - s1["cache"].get("writebacks", 0),
        "writeback_mib_run": (s2["cache"].get("writeback_bytes", 0) - s1["cache"].get("writeback_bytes", 0)) / 2**20,
        "dirty_chunks": s2["cache"].get("dirty_chunks", 0),
        "dirty_kib": s2["cache"].get("dirty_bytes", 0) / 1024,
        "dirty_chunks_idle3": s3["cache"].get("dirty_chunks", 0),
        "dirty_chunks_idle": s4["cache"].get("dirty_chunks", 0),
        "writebacks_idle": s4["cache"].get("writebacks", 0) - s2["cache"].get("writebacks", 0),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--runtime", type=int, default=20)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--iodepth", type=int, default=16)
    ap.add_argument("--idle", type=int, default=35)
    ap.add_argument("--workdir", default="/tmp/tv-tiering-bench")
    ap.add_argument("--placements", default="hdd-only,ssd-only,split,hot,cache,cache-bcache")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not shutil.which("fio"):
        raise SystemExit("fio is missing (apt-get install fio)")
    os.makedirs(a.workdir, exist_ok=True)
    placements = a.placements.split(",")
    runs = {pl: [] for pl in placements}
    # Placements interleaved per repetition, so a change in the machine's load hits all.
    for rep in range(a.reps):
        for pl in placements:
            r = one(pl, a, rep)
            runs[pl].append(r)
            print(f"rep {rep} {pl:8} {r['iops']:8.0f} IOPS  ssd share {r['ssd_share']:.3f}  "
                  f"promotions {r['promotions_warmup']}+{r['promotions_run']}", file=sys.stderr)
    med = {pl: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for pl, rs in runs.items()}
    print(f"\nfio randrw 70/30 4 KiB QD{a.iodepth} zipf:1.1 over {a.size_mib} MiB; SSD share "
          f"{a.size_mib // 2} MiB; warm-up {a.warmup} s, run {a.runtime} s; median of {a.reps}")
    print("(cache: promotions are fills, demotions evictions)")
    print(f"{'placement':12} {'IOPS':>8} {'rd p99 us':>10} {'wr p99 us':>10} {'SSD share':>9} "
          f"{'promo/demo warm-up':>18} {'promo/demo run':>14} {'chunks ssd/hdd':>14}")
    for pl in placements:
        m = med[pl]
        print(f"{pl:12} {m['iops']:8.0f} {m['read_p99_us']:10.0f} {m['write_p99_us']:10.0f} {m['ssd_share']:9.3f} "
              f"{m['promotions_warmup']:>8.0f} / {m['demotions_warmup']:<7.0f} {m['promotions_run']:>6.0f} / {m['demotions_run']:<5.0f} "
              f"{m['chunks_ssd']:>6.0f} / {m['chunks_hdd']:<5.0f}")
    print(f"\n{'placement':12} {'HDD ops/s':>9} {'HDD model ms/op':>15} {'HDD drive-cache hits':>20} "
          f"{'writebacks run':>14} {'MiB':>7} {'dirty after':>11} {'dirty KiB':>9} "
          f"{'dirty idle 3 s':>14} {f'idle {a.idle} s':>10} {'wb in idle':>10}")
    for pl in placements:
        m = med[pl]
        print(f"{pl:12} {m['hdd_ops_per_s']:9.0f} {m['hdd_model_ms']:15.2f} {m['hdd_cache_hit_share']:20.3f} "
              f"{m['writebacks_run']:14.0f} {m['writeback_mib_run']:7.1f} {m['dirty_chunks']:11.0f} "
              f"{m['dirty_kib']:9.0f} {m['dirty_chunks_idle3']:14.0f} {m['dirty_chunks_idle']:10.0f} "
              f"{m['writebacks_idle']:10.0f}")
    print(f"every run's verify pass read back all {a.size_mib} MiB with no error")
    if "hot" in med:
        for other in ["split", "cache", "cache-bcache", "ssd-only", "hdd-only"]:
            if other in med:
                print(f"IOPS hot/{other}: {med['hot']['iops'] / med[other]['iops']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "median": med, "args": vars(a)}, f, indent=2)


if __name__ == "__main__":
    main()
