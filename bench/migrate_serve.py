#!/usr/bin/env python3
"""Live storage migration through `tiervisor serve` (issue 13, seed 004), every scheme.

For each scheme: a fresh server with two pool files (ssd, hdd) and a thin 256 MiB volume
vm1 on the hdd pool; fio fills its first --size MiB, then writes it again at random (4 KiB,
iodepth 4) with crc32c verify headers while `ctl migrate start vm1 --to ssd --scheme S`
moves it (copy capped at --rate-mb-s); fio then reads everything back and checks it. After
the pivot a second fio pass (`--verify_only`) reads every block again through the
destination; `ctl stat` must show no chunk left on the hdd pool. Reported per scheme:
whether both verifies passed, migration time, the engine's pivot downtime, and the longest
and p99.9 write completion latency fio saw during the write pass (the client's longest
stall, an upper bound on what the pivot cost it; the issue's target is 10 ms or less, the
paper's pauses are about 200 ms).

Usage: bench/migrate_serve.py [--reps 3] [--size 128] [--rate-mb-s 32] [--bin PATH]
       [--workdir /tmp/tv-migbench] [--schemes dbt,mirror,lr,slr,aio]
"""

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_peers import free_port, tiervisor_bin, wait_port  # noqa: E402

# fio's verify state files go here, not into the repository.
FIO_DIR = tempfile.mkdtemp(prefix="tv-fio-")
atexit.register(shutil.rmtree, FIO_DIR, True)


def serve(binary, d):
    port = free_port()
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = os.path.join(d, "mig.toml")
    with open(cfg, "w") as f:
        f.write(f"""data_dir = "{d}"
listen = "127.0.0.1:{port}"
unix_socket = ""
admin_socket = "admin.sock"
chunk = "1m"
metadata_pool = "ssd"
[[pool]]
name = "ssd"
path = "ssd.pool"
size = "512m"
kind = "ssd"
[[pool]]
name = "hdd"
path = "hdd.pool"
size = "512m"
kind = "hdd"
[[volume]]
name = "vm1"
size = "256m"
pool = "hdd"
""")
    p = subprocess.Popen([binary, "serve", "--config", cfg, "--format-new"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return p, f"nbd://127.0.0.1:{port}/vm1"


def ctl(binary, d, *args):
    out = subprocess.run([binary, "ctl", *args, "--data-dir", d], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ctl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def fio(uri, size_mib, *extra):
    args = ["fio", "--output-format=json", f"--aux-path={FIO_DIR}", "--name=mig", "--ioengine=nbd",
            f"--uri={uri}", f"--size={size_mib}m"] + list(extra)
    r = subprocess.run(args, capture_output=True, text=True, cwd=FIO_DIR)
    out = r.stdout
    j = json.loads(out[out.index("{"):]) if "{" in out else None
    return r.returncode, j, r.stderr


def one(binary, work, scheme, size_mib, rate):
    d = os.path.join(work, scheme)
    p, uri = serve(binary, d)
    try:
        rc, _, err = fio(uri, size_mib, "--rw=write", "--bs=1m", "--iodepth=4")
        assert rc == 0, err
        verify = ["--bs=4k", "--verify=crc32c", "--verify_fatal=1", "--randrepeat=1", "--randseed=7"]
        result = {}

        def writer():
            result["fio"] = fio(uri, size_mib, "--rw=randwrite", "--iodepth=4", "--do_verify=1", *verify)

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        ctl(binary, d, "migrate", "start", "vm1", "--to", "ssd", "--scheme", scheme, "--rate-mb-s", str(rate))
        while True:
            m = json.loads(ctl(binary, d, "migrate", "status", "vm1", "--json"))[0]
            if not m["running"]:
                break
            time.sleep(0.05)
        wall = time.monotonic() - t0
        t.join()
        rc, j, err = result["fio"]
        write_ok = rc == 0 and j is not None and j["jobs"][0]["error"] == 0
        w = j["jobs"][0]["write"]["clat_ns"] if j else {}
        rc2, j2, err2 = fio(uri, size_mib, "--rw=randwrite", "--iodepth=4", "--verify_only", *verify)
        after_ok = rc2 == 0 and j2 is not None and j2["jobs"][0]["error"] == 0
        stat = json.loads(ctl(binary, d, "stat", "--json"))
        by_pool = dict(stat["engine"]["volumes"][0]["chunks_by_pool"])
        return {
            "phase": m["phase"],
            "verify_during": write_ok,
            "verify_after": after_ok,
            "moved": by_pool.get("hdd", 0) == 0 and by_pool.get("ssd", 0) >= size_mib,
            "migration_s": m["elapsed_s"],
            "wall_s": wall,
            "downtime_ms": m["downtime_ms"],
            "max_write_ms": w.get("max", 0) / 1e6,
            "p999_write_ms": w.get("percentile", {}).get("99.900000", 0) / 1e6,
            "redundant_mib": m["redundant_bytes"] / 2**20,
            "errors": (err if not write_ok else "") + (err2 if not after_ok else ""),
        }
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", type=int, default=128, help="MiB written and moved")
    ap.add_argument("--rate-mb-s", type=float, default=32)
    ap.add_argument("--bin", default=None)
    ap.add_argument("--workdir", default="/tmp/tv-migbench")
    ap.add_argument("--schemes", default="dbt,mirror,lr,slr,aio")
    a = ap.parse_args()
    if not shutil.which("fio"):
        raise SystemExit("fio is missing (apt-get install fio)")
    binary = a.bin or tiervisor_bin()
    os.makedirs(a.workdir, exist_ok=True)
    print(f"{a.size} MiB thin volume hdd -> ssd, copy capped at {a.rate_mb_s} MB/s, fio randwrite 4k "
          f"iodepth 4 with crc32c verify, {a.reps} runs (median; all runs must verify)")
    print("| scheme | verify during / after | moved | migration s | pivot downtime ms | "
          "longest write ms | p99.9 write ms | redundant MiB |")
    print("|---|---|---|---|---|---|---|---|")
    failed = False
    for s in a.schemes.split(","):
        runs = [one(binary, a.workdir, s, a.size, a.rate_mb_s) for _ in range(a.reps)]
        ok = all(r["verify_during"] and r["verify_after"] and r["moved"] and r["phase"] == "done" for r in runs)
        failed |= not ok
        med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
        print(f"| {s} | {'pass' if ok else 'FAIL'} | {sum(r['moved'] for r in runs)}/{len(runs)} | "
              f"{med('migration_s'):.2f} | {med('downtime_ms'):.1f} | {med('max_write_ms'):.1f} "
              f"(max {max(r['max_write_ms'] for r in runs):.1f}) | {med('p999_write_ms'):.2f} | "
              f"{med('redundant_mib'):.1f} |")
        for r in runs:
            if r["errors"]:
                print(r["errors"], file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
