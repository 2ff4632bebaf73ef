#!/usr/bin/env python3
"""The log-structured write path through `tiervisor serve`, on this machine's storage:
the same 1 GiB thick volume on the same kind of pool file, served with `log = false`
and with `log = true`, driven by the same fio NBD jobs (4 KiB random writes at iodepth 1
and 32, then a 4 KiB random read run over what was written), and the raw pool file
written directly by fio (psync) as the peer. Each run ends with fsync, so logged data is
on the file before the job's time stops. Then fio verifies (crc32c) a 256 MiB random
write run on the logged volume. Prints the median of --reps runs and on/off ratios.

Usage: bench/log_serve.py [--reps 3] [--runtime 5] [--workdir /tmp/tv-logbench]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_peers import serve_one_volume, tiervisor_bin  # noqa: E402


# fio writes `*-verify.state` files into its working directory; keep them (and anything
# else it leaves) in a temporary directory instead of the repository.
FIO_DIR = tempfile.mkdtemp(prefix="tv-fio-")
atexit.register(shutil.rmtree, FIO_DIR, True)

JOBS = [
    ("randwrite-4k-qd1", "randwrite", 1),
    ("randwrite-4k-qd32", "randwrite", 32),
    ("randread-4k-qd32", "randread", 32),
]
SIZE = 1 << 30


def start(work, log):
    d = os.path.join(work, f"log-{log}")
    p, port = serve_one_volume(d, "2600m", f"log = {'true' if log else 'false'}")
    return p, f"nbd://127.0.0.1:{port}/vm1", d


def fio(args):
    out = subprocess.run(["fio", "--output-format=json", f"--aux-path={FIO_DIR}"] + args, capture_output=True,
                         text=True, check=True, cwd=FIO_DIR).stdout
    j = json.loads(out[out.index("{"):])["jobs"][0]
    return j


def run_job(target, rw, qd, runtime):
    common = [f"--rw={rw}", "--bs=4k", f"--size={SIZE}", "--time_based", f"--runtime={runtime}",
              "--randrepeat=1", "--end_fsync=1", "--name=j"]
    if target.startswith("nbd://"):
        j = fio(["--ioengine=nbd", f"--uri={target}", f"--iodepth={qd}"] + common)
    else:
        # The peer: the raw file, positional I/O, numjobs for depth.
        j = fio(["--ioengine=psync", f"--filename={target}", f"--numjobs={qd}", "--group_reporting"] + common)
    d = j["read"] if rw == "randread" else j["write"]
    p99 = d["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000.0
    return {"iops": d["iops"], "mb_s": d["bw_bytes"] / 1e6, "p99_us": p99}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/tv-logbench")
    a = ap.parse_args()
    if not shutil.which("fio"):
        raise SystemExit("fio is missing (apt-get install fio)")
    os.makedirs(a.workdir, exist_ok=True)
    raw = os.path.join(a.workdir, "raw.img")
    with open(raw, "wb") as f:
        f.truncate(SIZE)
    results = {}
    for log in (False, True):
        proc, uri, d = start(a.workdir, log)
        try:
            for job, rw, qd in JOBS:
                runs = [run_job(uri, rw, qd, a.runtime) for _ in range(a.reps)]
                results[(log, job)] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            if log:
                st = json.loads(subprocess.run([tiervisor_bin(), "ctl", "stat", "--json", "--data-dir", d],
                                               capture_output=True, text=True, check=True).stdout)
                results["log"] = st["engine"]["pools"][0]["log"]
                v = fio(["--name=v", "--ioengine=nbd", f"--uri={uri}", "--rw=randwrite", "--bs=4k", "--size=256m",
                         "--iodepth=16", "--verify=crc32c", "--do_verify=1", "--end_fsync=1"])
                results["verify_errors"] = v["error"]
        finally:
            proc.terminate()
            proc.wait()
    for job, rw, qd in JOBS:
        runs = [run_job(raw, rw, qd, a.runtime) for _ in range(a.reps)]
        results[("raw", job)] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{'job':<20} {'target':<12} {'IOPS':>10} {'MB/s':>9} {'p99 us':>9} {'on/off':>7}")
    for job, _, _ in JOBS:
        off = results[(False, job)]
        for name, key in (("log off", False), ("log on", True), ("raw file", "raw")):
            r = results[(key, job)]
            ratio = f"{r['iops'] / off['iops']:.2f}" if key is True and off["iops"] else ""
            print(f"{job:<20} {name:<12} {r['iops']:>10.0f} {r['mb_s']:>9.1f} {r['p99_us']:>9.0f} {ratio:>7}")
    l = results["log"]
    print(f"\nlog: {l['user_writes']} writes in {l['appends']} appends, {l['segments_cleaned']} segments cleaned, "
          f"write amplification {l['write_amplification']:.2f}, {l['home_fallbacks']} to home")
    print(f"fio crc32c verify of 256 MiB random writes through the log: {'ok' if results['verify_errors'] == 0 else 'FAILED'}")
    if results["verify_errors"] != 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
