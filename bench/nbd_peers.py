#!/usr/bin/env python3
"""Serve the same 1 GiB of data with tiervisor, qemu-nbd and nbdkit (file plugin), one
after the other, and drive each with the same fio NBD jobs. Prints IOPS, MB/s and p99
completion latency per job and server (median of --reps runs) and tiervisor/peer ratios.

tiervisor serves a 1 GiB thick volume on a pool file; it is filled from the same random
1 GiB raw file the peers serve, so every read touches data (no never-written shortcut).

Usage: bench/nbd_peers.py [--reps 3] [--runtime 5] [--workdir /tmp/tv-bench] [--json out.json]
"""

import argparse
import atexit
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


# fio writes `*-verify.state` files into its working directory; keep them (and anything
# else it leaves) in a temporary directory instead of the repository.
FIO_DIR = tempfile.mkdtemp(prefix="tv-fio-")
atexit.register(shutil.rmtree, FIO_DIR, True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = [
    # name, rw, bs, iodepth
    ("randread-4k-qd1", "randread", "4k", 1),
    ("randread-4k-qd32", "randread", "4k", 32),
    ("randwrite-4k-qd1", "randwrite", "4k", 1),
    ("randwrite-4k-qd32", "randwrite", "4k", 32),
    ("read-1m-qd4", "read", "1m", 4),
    ("write-1m-qd4", "write", "1m", 4),
]
SIZE = 1 << 30


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=30):
    t = time.time() + timeout
    while time.time() < t:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server on port {port} did not come up")


def tiervisor_bin():
    """target/release/tiervisor (built if absent), or $TIERVISOR_BIN."""
    if os.environ.get("TIERVISOR_BIN"):
        return os.environ["TIERVISOR_BIN"]
    b = os.path.join(ROOT, "target", "release", "tiervisor")
    if not os.path.exists(b):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "tiervisor"], cwd=ROOT, check=True)
    return b


def serve_config(d, pools_and_volumes, log=False, cpus=None):
    """Start `tiervisor serve --format-new` in a fresh `d` with a config of its own listener
    and admin socket plus `pools_and_volumes` (TOML). Returns (process, port); with `log`,
    the server's stderr goes to d/serve.log; with `cpus` (a taskset list), the server runs
    on those CPUs only."""
    port = free_port()
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = os.path.join(d, "bench.toml")
    with open(cfg, "w") as f:
        f.write(f"""data_dir = "{d}"
listen = "127.0.0.1:{port}"
unix_socket = ""
admin_socket = "admin.sock"
{pools_and_volumes}""")
    err = open(os.path.join(d, "serve.log"), "w") if log else subprocess.DEVNULL
    pin = ["taskset", "-c", cpus] if cpus else []
    p = subprocess.Popen(pin + [tiervisor_bin(), "serve", "--config", cfg, "--format-new"],
                         stdout=subprocess.DEVNULL, stderr=err)
    wait_port(port)
    # The NBD port is bound before the pools are mounted; the admin socket only once the
    # server is ready (ctl commands need it).
    t = time.time() + 60
    while not os.path.exists(os.path.join(d, "admin.sock")):
        if time.time() > t or p.poll() is not None:
            raise SystemExit(f"server in {d} did not become ready")
        time.sleep(0.05)
    return p, port


def fio_randread_iops(port, names, runtime, cpus=None):
    """4 KiB random reads at depth 8 on each export of `names` at once (fio's nbd engine,
    1 s ramp): {name: IOPS}. With `cpus`, fio runs on those CPUs only."""
    pin = ["taskset", "-c", cpus] if cpus else []
    args = pin + ["fio", "--output-format=json", "--ioengine=nbd", "--rw=randread", "--bs=4k",
                  "--size=1g", "--time_based", f"--runtime={runtime}", "--ramp_time=1",
                  "--randrepeat=0", "--iodepth=8"]
    for name in names:
        args += [f"--name={name}", f"--uri=nbd://127.0.0.1:{port}/{name}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    jobs = {j["jobname"]: j for j in json.loads(out[out.index("{"):])["jobs"]}
    return {n: jobs[n]["read"]["iops"] for n in names}


def serve_one_volume(d, pool_size, pool_keys=""):
    """Start `tiervisor serve` in a fresh `d`: one SSD pool file of `pool_size` (plus
    `pool_keys` lines), one 1 GiB thick volume vm1. Returns (process, port)."""
    return serve_config(d, f"""[[pool]]
name = "data"
path = "data.pool"
size = "{pool_size}"
kind = "ssd"
{pool_keys}
[[volume]]
name = "vm1"
size = "1g"
pool = "data"
provisioning = "thick"
""")


def start_tiervisor(work, raw):
    p, port = serve_one_volume(os.path.join(work, "tv"), "1100m")
    # Same bytes as the peers serve.
    subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", raw, f"nbd://127.0.0.1:{port}/vm1"], check=True)
    return p, f"nbd://127.0.0.1:{port}/vm1"


def start_qemu_nbd(work, raw):
    port = free_port()
    p = subprocess.Popen(["qemu-nbd", "-f", "raw", "-x", "vm1", "-t", "--shared=64", "-b", "127.0.0.1", "-p", str(port), raw],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return p, f"nbd://127.0.0.1:{port}/vm1"


def start_nbdkit(work, raw):
    port = free_port()
    p = subprocess.Popen(["nbdkit", "-f", "-i", "127.0.0.1", "-p", str(port), "file", raw],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return p, f"nbd://127.0.0.1:{port}/"


def run_fio(uri, rw, bs, qd, runtime):
    cmd = ["fio", "--name=j", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}", f"--iodepth={qd}",
           f"--size={SIZE}", "--time_based", f"--runtime={runtime}", "--ramp_time=1", "--randrepeat=1",
           "--output-format=json", f"--aux-path={FIO_DIR}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=FIO_DIR).stdout
    j = json.loads(out[out.index("{"):])["jobs"][0]
    d = j["read"] if "read" in rw else j["write"]
    p99 = d["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000.0
    return {"iops": d["iops"], "mb_s": d["bw_bytes"] / 1e6, "p99_us": p99}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/tv-bench")
    ap.add_argument("--json")
    a = ap.parse_args()
    for tool in ["fio", "qemu-nbd", "qemu-img", "nbdkit"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing (apt-get install fio qemu-utils nbdkit)")
    os.makedirs(a.workdir, exist_ok=True)
    raw = os.path.join(a.workdir, "disk.raw")
    if not os.path.exists(raw) or os.path.getsize(raw) != SIZE:
        with open(raw, "wb") as f:
            for _ in range(SIZE >> 20):
                f.write(os.urandom(1 << 20))
    servers = [("tiervisor", start_tiervisor), ("qemu-nbd", start_qemu_nbd), ("nbdkit", start_nbdkit)]
    results = {}
    for name, start in servers:
        proc, uri = start(a.workdir, raw)
        try:
            for job, rw, bs, qd in JOBS:
                runs = [run_fio(uri, rw, bs, qd, a.runtime) for _ in range(a.reps)]
                results.setdefault(job, {})[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                print(f"{name:10} {job:18} {results[job][name]['iops']:10.0f} IOPS", file=sys.stderr)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    print(f"\n{'job':18} {'server':10} {'IOPS':>10} {'MB/s':>9} {'p99 us':>9}   tiervisor/peer IOPS")
    for job, _, _, _ in JOBS:
        tv = results[job]["tiervisor"]["iops"]
        for name, _ in servers:
            r = results[job][name]
            ratio = "" if name == "tiervisor" else f"{tv / r['iops']:.2f}"
            print(f"{job:18} {name:10} {r['iops']:10.0f} {r['mb_s']:9.1f} {r['p99_us']:9.1f}   {ratio}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
