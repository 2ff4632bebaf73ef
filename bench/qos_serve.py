#!/usr/bin/env python3
"""Per-volume QoS in `tiervisor serve` through NBD (issue 12): an mClock pool with three
volumes driven at once by fio (4 KiB random writes):
  lim: limit_iops = 2000, QD32 (must stay within 5 % of 2000 while `hog` saturates);
  res: reservation_iops = 500, QD8 (must get its reservation);
  hog: no QoS, QD32 (takes what is left).
Halfway through, `tiervisor ctl qos lim --limit-iops 1000`; the 500 ms windows of fio's
IOPS log show when the new limit holds (the issue: within a second). One server serves
every run; each run first sets the limit back to 2000.

Usage: bench/qos_serve.py [--runtime 10] [--reps 3] [--workdir /tmp/tv-qos-bench] [--json out.json]
(TIERVISOR_BIN picks the binary; default target/release/tiervisor.)
"""

import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_peers import serve_config, tiervisor_bin  # noqa: E402

WINDOW_MS = 500


def serve(d):
    return serve_config(d, """[[pool]]
name = "data"
path = "data.pool"
size = "4g"
kind = "ssd"
scheduler = "mclock"
[[volume]]
name = "lim"
size = "1g"
pool = "data"
provisioning = "thick"
limit_iops = 2000
[[volume]]
name = "res"
size = "1g"
pool = "data"
provisioning = "thick"
reservation_iops = 500
[[volume]]
name = "hog"
size = "1g"
pool = "data"
provisioning = "thick"
""", log=True)


def windows(path):
    """fio IOPS log -> list of (end ms, IOPS) per window."""
    out = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 2:
            out.append((int(f[0]), float(f[1])))
    return out


def one(d, port, runtime):
    # Each run starts from the configured limit.
    subprocess.run([tiervisor_bin(), "ctl", "qos", "lim", "--limit-iops", "2000", "--data-dir", d],
                   capture_output=True, check=True)
    logs = tempfile.mkdtemp(prefix="tv-qos-fio-")
    try:
        args = ["fio", "--output-format=json", f"--aux-path={logs}", "--ioengine=nbd", "--rw=randwrite",
                "--bs=4k", "--size=1g", "--time_based", f"--runtime={runtime}", "--randrepeat=1",
                f"--log_avg_msec={WINDOW_MS}"]
        for name, qd in [("lim", 32), ("res", 8), ("hog", 32)]:
            args += [f"--name={name}", f"--uri=nbd://127.0.0.1:{port}/{name}", f"--iodepth={qd}",
                     f"--write_iops_log={os.path.join(logs, name)}"]
        change_at = runtime / 2
        changed = {}

        def change():
            time.sleep(change_at)
            changed["t"] = time.monotonic()
            subprocess.run([tiervisor_bin(), "ctl", "qos", "lim", "--limit-iops", "1000", "--data-dir", d],
                           capture_output=True, check=True)

        t0 = time.monotonic()
        th = threading.Thread(target=change)
        th.start()
        out = subprocess.run(args, capture_output=True, text=True, check=True, cwd=logs).stdout
        th.join()
        jobs = {j["jobname"]: j for j in json.loads(out[out.index("{"):])["jobs"]}
        lim_log = windows(glob.glob(os.path.join(logs, "lim_iops*.log"))[0])
        change_ms = (changed["t"] - t0) * 1000
        # Skip the first window (connection start) and the one the change falls in: a
        # window counts after the change only if it started after the command.
        before = [v for t, v in lim_log if WINDOW_MS < t <= change_ms]
        after = [(t, v) for t, v in lim_log if t - WINDOW_MS >= change_ms]
        settled = next((t - change_ms for t, v in after if abs(v - 1000) <= 50), None)
        res_log = windows(glob.glob(os.path.join(logs, "res_iops*.log"))[0])
        return {
            "lim_before_iops": statistics.median(before) if before else 0.0,
            "lim_after_iops": statistics.median(v for _, v in after) if after else 0.0,
            "lim_settled_ms": settled if settled is not None else float("inf"),
            "res_iops": statistics.median(v for t, v in res_log if t > WINDOW_MS),
            "hog_iops": jobs["hog"]["write"]["iops"],
        }
    finally:
        shutil.rmtree(logs, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/tv-qos-bench")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not shutil.which("fio"):
        raise SystemExit("fio is missing (apt-get install fio)")
    os.makedirs(a.workdir, exist_ok=True)
    # One server for every run: a thick volume's file is slow to free on some disks.
    d = os.path.join(a.workdir, "tv")
    p, port = serve(d)
    try:
        runs = [one(d, port, a.runtime) for _ in range(a.reps)]
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=300)
        shutil.rmtree(d, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"median of {a.reps} runs of {a.runtime} s, {WINDOW_MS} ms windows")
    print(f"lim  limit 2000: {med['lim_before_iops']:.0f} IOPS ({med['lim_before_iops'] / 2000:.3f} of the limit;"
          f" target within 5 %)")
    print(f"lim  limit 1000 after ctl qos: {med['lim_after_iops']:.0f} IOPS ({med['lim_after_iops'] / 1000:.3f});"
          f" first window within 5 % ends {med['lim_settled_ms']:.0f} ms after the command (target: 1 s)")
    print(f"res  reservation 500: {med['res_iops']:.0f} IOPS")
    print(f"hog  no QoS: {med['hog_iops']:.0f} IOPS")
    for r in runs:
        print("  run:", {k: round(v, 1) for k, v in r.items()}, file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"median": med, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
