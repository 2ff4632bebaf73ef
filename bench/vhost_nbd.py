#!/usr/bin/env python3
"""vhost-user-blk against NBD over a Unix socket, on one tiervisor server: random 4 KiB
reads at QD32 (or --qd) over a 256 MiB thick volume filled with data first (so every read
touches the pool file, here in the page cache). Both transports are driven by
`tiervisor blk-bench`: for vhost-user its small host-side frontend (shared memfd guest
memory, one virtqueue), for NBD the same loop over the Unix socket. Reports the median of
--reps runs: IOPS, server CPU per request and client CPU per request (µs), and the ratios.

Usage: bench/vhost_nbd.py [--reps 3] [--runtime 5] [--qd 32] [--workdir /tmp/tv-vhost-bench]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def tiervisor_bin():
    """target/release/tiervisor (built if absent), or $TIERVISOR_BIN."""
    if os.environ.get("TIERVISOR_BIN"):
        return os.environ["TIERVISOR_BIN"]
    b = os.path.join(ROOT, "target", "release", "tiervisor")
    if not os.path.exists(b):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "tiervisor"], cwd=ROOT, check=True)
    return b


CONFIG = """
listen = ""
unix_socket = "nbd.sock"
vhost_user_dir = "vhost"
chunk = "1m"
journal = "4m"
metadata_pool = "ssd"

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "512m"
kind = "ssd"

[[volume]]
name = "vol"
size = "256m"
pool = "ssd"
provisioning = "thick"
"""


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run_client(tv, target, args):
    """One blk-bench run's JSON (its CPU time shows in os.times()'s children fields)."""
    cmd = [tv, "blk-bench", target, "--qd", str(args.qd), "--bs", "4096",
           "--runtime-s", str(args.runtime)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err}")
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtime", type=float, default=5)
    ap.add_argument("--qd", type=int, default=32)
    ap.add_argument("--workdir", default="/tmp/tv-vhost-bench")
    args = ap.parse_args()
    tv = tiervisor_bin()
    d = args.workdir
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = os.path.join(d, "bench.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    log = open(os.path.join(d, "serve.log"), "w")
    srv = subprocess.Popen([tv, "serve", "--config", cfg, "--data-dir", d, "--format-new"],
                           stdout=subprocess.DEVNULL, stderr=log)
    try:
        nbd_sock = os.path.join(d, "nbd.sock")
        vhost_sock = os.path.join(d, "vhost", "vol.sock")
        t = time.time() + 60
        while not (os.path.exists(nbd_sock) and os.path.exists(vhost_sock)):
            if time.time() > t or srv.poll() is not None:
                raise SystemExit("server did not come up; see " + log.name)
            time.sleep(0.05)
        uri = f"nbd+unix:///vol?socket={nbd_sock}"
        subprocess.run(["qemu-io", "-f", "raw", "-c", "write -P 0xab 0 256M", uri],
                       check=True, stdout=subprocess.DEVNULL)
        rows = {"nbd": [], "vhost": []}
        for rep in range(args.reps):
            for name, target in (("nbd", uri), ("vhost", "vhost-user:" + vhost_sock)):
                s0 = cpu_s(srv.pid)
                t0 = os.times()
                res = run_client(tv, target, args)
                t1 = os.times()
                s1 = cpu_s(srv.pid)
                # The whole client run (warm-up included) against the whole server time
                # over it: both per request counted over the same span.
                total = res["requests"] * (1 + 1 / args.runtime)
                client = (t1.children_user + t1.children_system) - (t0.children_user + t0.children_system)
                rows[name].append({
                    "iops": res["iops"],
                    "server_us": (s1 - s0) / total * 1e6,
                    "client_us": client / total * 1e6,
                })
                print(f"rep {rep + 1} {name}: {res['iops']:,.0f} IOPS", file=sys.stderr)
        med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rows.items()}
        print(f"randread 4k QD{args.qd}, median of {args.reps} x {args.runtime:g} s")
        print("| transport | IOPS | server CPU µs/req | client CPU µs/req |")
        print("|---|---|---|---|")
        for n, label in (("vhost", "vhost-user-blk"), ("nbd", "NBD (Unix socket)")):
            m = med[n]
            print(f"| {label} | {m['iops']:,.0f} | {m['server_us']:.2f} | {m['client_us']:.2f} |")
        print(f"| vhost/NBD | {med['vhost']['iops'] / med['nbd']['iops']:.2f} | "
              f"{med['vhost']['server_us'] / med['nbd']['server_us']:.2f} | "
              f"{med['vhost']['client_us'] / med['nbd']['client_us']:.2f} |")
    finally:
        srv.terminate()
        try:
            srv.wait(60)
        except subprocess.TimeoutExpired:
            srv.kill()
        log.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
