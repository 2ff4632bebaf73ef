#!/usr/bin/env python3
"""An mClock reservation where it matters (issue 12): a pool that can do only about 160
IOPS (a page-cached file behind the virtual performance throttle, a linear disk model at
k = 1, queue depth 1, so the scheduler decides every dispatch), shared by
  res: weight 1, reservation_iops = R (QD8),
  hog: weight 9, no reservation (QD8),
both 4 KiB random reads through NBD with fio. By weight alone res would get a tenth of
the pool; with the reservation it must get R. Each repetition runs twice on one server,
first with the reservation, then with `ctl qos res --reservation-iops 0` (the control),
and prints res's and hog's IOPS in both and the pool's total.

Usage: bench/qos_reservation.py [--reservation 60] [--runtime 8] [--reps 3]
       [--workdir /tmp/tv-qos-res] [--json out.json]
(TIERVISOR_BIN picks the binary; default target/release/tiervisor.)
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_peers import fio_randread_iops, serve_config, tiervisor_bin  # noqa: E402

VOLUME_BYTES = 1 << 30


def serve(d, reservation):
    # D = the volume's size, so d/D spans [0, 1] over a volume as the paper scales it.
    return serve_config(d, f"""[[pool]]
name = "disk"
path = "disk.pool"
size = "3g"
kind = "hdd"
queue_depth = 1
scheduler = "mclock"
throttle = {{ model = "linear", k = 1, adapt = false, max_seek_sectors = {VOLUME_BYTES // 512} }}
[[volume]]
name = "res"
size = "1g"
pool = "disk"
provisioning = "thick"
weight = 1
reservation_iops = {reservation}
[[volume]]
name = "hog"
size = "1g"
pool = "disk"
provisioning = "thick"
weight = 9
""", log=True)


def ctl_qos(d, reservation):
    subprocess.run([tiervisor_bin(), "ctl", "qos", "res", "--reservation-iops", str(reservation),
                    "--data-dir", d], capture_output=True, check=True)


def run_fio(port, runtime):
    return fio_randread_iops(port, ["res", "hog"], runtime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reservation", type=int, default=60)
    ap.add_argument("--runtime", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/tv-qos-res")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not shutil.which("fio"):
        raise SystemExit("fio is missing (apt-get install fio)")
    os.makedirs(a.workdir, exist_ok=True)
    d = os.path.join(a.workdir, "tv")
    p, port = serve(d, a.reservation)
    runs = []
    try:
        for _ in range(a.reps):
            ctl_qos(d, a.reservation)
            with_r = run_fio(port, a.runtime)
            ctl_qos(d, 0)
            without = run_fio(port, a.runtime)
            runs.append({"res_with": with_r["res"], "hog_with": with_r["hog"],
                         "res_without": without["res"], "hog_without": without["hog"]})
            print("  run:", {k: round(v, 1) for k, v in runs[-1].items()}, file=sys.stderr)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=300)
        shutil.rmtree(d, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    r = a.reservation
    total_with = med["res_with"] + med["hog_with"]
    total_without = med["res_without"] + med["hog_without"]
    print(f"median of {a.reps} runs of {a.runtime} s each way; pool: linear model, k = 1, queue depth 1")
    print(f"{'':28} {'res IOPS':>9} {'hog IOPS':>9} {'pool IOPS':>10} {'res share':>10}")
    print(f"{'reservation ' + str(r) + ', weights 1:9':28} {med['res_with']:9.1f} {med['hog_with']:9.1f}"
          f" {total_with:10.1f} {med['res_with'] / total_with:10.3f}")
    print(f"{'no reservation, weights 1:9':28} {med['res_without']:9.1f} {med['hog_without']:9.1f}"
          f" {total_without:10.1f} {med['res_without'] / total_without:10.3f}")
    print(f"res with its reservation: {med['res_with']:.1f} of {r} IOPS = {med['res_with'] / r:.3f}"
          f" (target: at least 0.95); by weight alone {med['res_without']:.1f}"
          f" ({med['res_without'] / total_without:.3f} of the pool; the weights give 0.100)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"reservation_iops": r, "median": med, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
