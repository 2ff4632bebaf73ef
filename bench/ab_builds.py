#!/usr/bin/env python3
"""Compare two (or more) tiervisor builds on the same NBD jobs, alternating runs, and
report per build the median IOPS and the server's CPU time per request (user + system,
all threads, from /proc/PID/stat over the whole fio run, divided by fio's request count).

On a loaded machine IOPS swing by 2x or more between runs of the same binary; CPU time per
request moves less, but still by 15 % between two names for the same binary on the shared
2-core machine (an A/A run: give the same path twice), so run that first to know the noise.
With --perf, also the share of the server's samples spent in its own code (not the
kernel or libc), from `perf record` of one extra run per build.

Usage: bench/ab_builds.py before=/path/to/tiervisor after=target/release/tiervisor
       [--reps 3] [--runtime 4] [--workdir /tmp/tv-bench-ab] [--perf]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd_peers as P  # noqa: E402

JOBS = [
    ("randwrite-4k-qd1", "randwrite", "4k", 1),
    ("randread-4k-qd1", "randread", "4k", 1),
    ("randread-4k-qd32", "randread", "4k", 32),
]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    # Fields after the command name: utime and stime are the 12th and 13th (0-based 11, 12).
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def fio(uri, rw, bs, qd, runtime):
    cmd = ["fio", "--name=j", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}",
           f"--iodepth={qd}", f"--size={P.SIZE}", "--time_based", f"--runtime={runtime}",
           "--randrepeat=1", "--output-format=json", f"--aux-path={P.FIO_DIR}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=P.FIO_DIR).stdout
    d = json.loads(out[out.index("{"):])["jobs"][0]
    d = d["read"] if "read" in rw else d["write"]
    return d["iops"], d["total_ios"]


def own_share(pid, binary, uri, runtime):
    data = os.path.join(P.FIO_DIR, "perf.data")
    perf = subprocess.Popen(["perf", "record", "-F", "1000", "-p", str(pid), "-o", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fio(uri, "randwrite", "4k", 1, runtime)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso",
                          "--stdio"], capture_output=True, text=True).stdout
    name = os.path.basename(binary)
    for line in rep.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == name:
            return float(parts[0].rstrip("%"))
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+", help="NAME=PATH of a tiervisor binary")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=4)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "tv-bench-ab"))
    ap.add_argument("--perf", action="store_true")
    a = ap.parse_args()
    builds = []
    for b in a.builds:
        name, sep, path = b.partition("=")
        if not sep or not os.access(path, os.X_OK):
            raise SystemExit(f"{b}: expected NAME=PATH of an executable tiervisor")
        builds.append((name, path))
    os.makedirs(a.workdir, exist_ok=True)
    raw = os.path.join(a.workdir, "disk.raw")
    if not os.path.exists(raw) or os.path.getsize(raw) != P.SIZE:
        with open(raw, "wb") as f:
            for _ in range(P.SIZE >> 20):
                f.write(os.urandom(1 << 20))
    res, share = {}, {}
    for rep in range(a.reps):
        # Alternate the order, so that neither build always runs right after the
        # other's 1 GiB pool copy (whose dirty pages are still being written back).
        for name, path in (builds if rep % 2 == 0 else builds[::-1]):
            os.environ["TIERVISOR_BIN"] = path
            proc, uri = P.start_tiervisor(a.workdir, raw)
            try:
                for job, rw, bs, qd in JOBS:
                    c0 = cpu_s(proc.pid)
                    iops, ios = fio(uri, rw, bs, qd, a.runtime)
                    c1 = cpu_s(proc.pid)
                    res.setdefault((name, job), []).append((iops, (c1 - c0) / max(ios, 1) * 1e6))
                if a.perf and rep == 0:
                    share[name] = own_share(proc.pid, path, uri, a.runtime)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
    base = builds[0][0]
    print(f"{'job':18} {'build':10} {'IOPS':>8} {'CPU us/req':>10} {'CPU ratio':>9}  IOPS runs")
    for job, *_ in JOBS:
        cpu0 = statistics.median(c for _, c in res[(base, job)])
        for name, _ in builds:
            v = res[(name, job)]
            cpu = statistics.median(c for _, c in v)
            print(f"{job:18} {name:10} {statistics.median(i for i, _ in v):8.0f} {cpu:10.2f} "
                  f"{cpu / cpu0:9.3f}  {[round(i) for i, _ in v]}")
    for name, s in share.items():
        print(f"{name}: {s:.1f} % of the server's perf samples in its own code (randwrite QD1)")


if __name__ == "__main__":
    main()
