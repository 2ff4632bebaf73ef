#!/usr/bin/env python3
"""Issue 18: K volumes, one fio nbd job per volume (QD32 4 KiB random reads, then random
writes), against tiervisor at `--threads 1` and `--threads K` (and, with $TIERVISOR_BASE_BIN,
the binary from before the server was split into front and shards: "today"), nbdkit
(file plugin, `dir=`: one export per file) and qemu-nbd (one process per file), each
serving K files of the same random bytes on page-cached storage. The server runs under
`taskset -c SERVER_CPUS`, fio under `taskset -c CLIENT_CPUS`. Prints per server and job:
IOPS (sum over the K jobs), p99 (worst job) and the server's CPU seconds per million
requests (utime + stime of its processes, from /proc, over the measured run), median of
--reps runs, and each one's ratio to tiervisor at --threads K. Every server of one K is up
at once and the runs interleave (rep 1 of each, then rep 2 of each), so load from
elsewhere on the machine does not fall on one server only.

Usage: bench/shard_peers.py [--volumes 1,2] [--reps 3] [--runtime 5] [--size 512m]
       [--server-cpus 0] [--client-cpus 1] [--workdir /tmp/tv-shard-bench]
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

JOBS = [("randread-4k-qd32", "randread"), ("randwrite-4k-qd32", "randwrite")]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pids):
    """utime + stime of `pids` and all their threads, in seconds."""
    t = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            t += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return t / TICK


def size_bytes(s):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(s[:-1]) * units[s[-1].lower()] if s[-1].lower() in units else int(s)


def start_tiervisor(work, raws, threads, size, cpus, binary):
    k = len(raws)
    vols = "".join(f"""
[[volume]]
name = "vm{i + 1}"
size = "{size}"
pool = "data"
provisioning = "thick"
""" for i in range(k))
    # Each shard's slice of the pool holds its volumes and its metadata.
    pool_mib = k * (size_bytes(size) >> 20) + 96 * k + 64
    d = os.path.join(work, f"tv-{threads}-{os.path.basename(binary)}")
    os.environ["TIERVISOR_BIN"] = binary
    extra = f"threads = {threads}\n" if threads > 1 else ""
    p, port = peers.serve_config(d, f"""{extra}[[pool]]
name = "data"
path = "data.pool"
size = "{pool_mib}m"
kind = "ssd"
{vols}""", log=True)
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(p.pid)], check=True, capture_output=True)
    uris = [f"nbd://127.0.0.1:{port}/vm{i + 1}" for i in range(k)]
    for raw, uri in zip(raws, uris):
        subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", raw, uri], check=True)
    return [p], uris, lambda: shutil.rmtree(d, ignore_errors=True)


def start_nbdkit(work, raws, cpus):
    port = peers.free_port()
    d = os.path.dirname(raws[0])
    p = subprocess.Popen(["taskset", "-c", cpus, "nbdkit", "-f", "-i", "127.0.0.1", "-p", str(port), "file", f"dir={d}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peers.wait_port(port)
    return [p], [f"nbd://127.0.0.1:{port}/{os.path.basename(r)}" for r in raws], lambda: None


def start_qemu_nbd(work, raws, cpus):
    procs, uris = [], []
    for i, raw in enumerate(raws):
        port = peers.free_port()
        p = subprocess.Popen(["taskset", "-c", cpus, "qemu-nbd", "-f", "raw", "-x", "vm", "-t", "--shared=64",
                              "-b", "127.0.0.1", "-p", str(port), raw],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peers.wait_port(port)
        procs.append(p)
        uris.append(f"nbd://127.0.0.1:{port}/vm")
    return procs, uris, lambda: None


def run_fio(uris, rw, size, runtime, cpus, pids, fio_dir):
    """One fio job per URI, all at once; (IOPS sum, worst p99 us, server CPU s)."""
    cmd = ["taskset", "-c", cpus, "fio", "--ioengine=nbd", f"--rw={rw}", "--bs=4k", "--iodepth=32",
           f"--size={size}", "--time_based", f"--runtime={runtime}", "--ramp_time=1", "--randrepeat=1",
           "--group_reporting=0", "--output-format=json", f"--aux-path={fio_dir}"]
    for i, u in enumerate(uris):
        cmd += [f"--name=j{i}", f"--uri={u}"]
    # The CPU window is fio's whole run, ramp second included; the requests in it are
    # estimated as the measured IOPS times the wall time (the ramp runs at about the same
    # rate; connecting takes milliseconds), alike for every server.
    c0 = cpu_s(pids)
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=fio_dir).stdout
    wall = time.time() - t0
    c1 = cpu_s(pids)
    jobs = json.loads(out[out.index("{"):])["jobs"]
    side = "read" if "read" in rw else "write"
    iops = sum(j[side]["iops"] for j in jobs)
    p99 = max(j[side]["clat_ns"].get("percentile", {}).get("99.000000", 0) for j in jobs) / 1000.0
    requests = iops * wall
    return {"iops": iops, "p99_us": p99, "cpu_s_per_mreq": (c1 - c0) / max(requests, 1) * 1e6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--volumes", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=5)
    ap.add_argument("--size", default="512m")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--workdir", default="/tmp/tv-shard-bench")
    ap.add_argument("--json")
    a = ap.parse_args()
    for tool in ["fio", "qemu-nbd", "qemu-img", "nbdkit", "taskset"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing (apt-get install fio qemu-utils nbdkit util-linux)")
    fio_dir = tempfile.mkdtemp(prefix="tv-fio-")
    binary = peers.tiervisor_bin()
    base = os.environ.get("TIERVISOR_BASE_BIN")
    results = {}
    for k in [int(x) for x in a.volumes.split(",")]:
        files = os.path.join(a.workdir, f"files-{k}")
        os.makedirs(files, exist_ok=True)
        raws = []
        for i in range(k):
            raw = os.path.join(files, f"vm{i + 1}")
            if not os.path.exists(raw) or os.path.getsize(raw) != size_bytes(a.size):
                with open(raw, "wb") as f:
                    for _ in range(size_bytes(a.size) >> 20):
                        f.write(os.urandom(1 << 20))
            raws.append(raw)
        servers = []
        if base:
            servers.append(("tv-today", lambda: start_tiervisor(a.workdir, raws, 1, a.size, a.server_cpus, base)))
        servers.append(("tv-threads1", lambda: start_tiervisor(a.workdir, raws, 1, a.size, a.server_cpus, binary)))
        if k > 1:
            servers.append((f"tv-threads{k}", lambda: start_tiervisor(a.workdir, raws, k, a.size, a.server_cpus, binary)))
        servers.append(("nbdkit", lambda: start_nbdkit(a.workdir, raws, a.server_cpus)))
        servers.append(("qemu-nbd", lambda: start_qemu_nbd(a.workdir, raws, a.server_cpus)))
        # Every server runs at once (idle ones cost nothing), and the runs interleave:
        # rep 1 of each server, then rep 2 of each, so a burst of load from elsewhere on
        # the machine does not land on one server only.
        started = []
        try:
            for name, start in servers:
                procs, uris, cleanup = start()
                started.append((name, procs, uris, cleanup))
            for job, rw in JOBS:
                runs = {name: [] for name, _, _, _ in started}
                for _ in range(a.reps):
                    for name, procs, uris, _ in started:
                        pids = [p.pid for p in procs]
                        runs[name].append(run_fio(uris, rw, a.size, a.runtime, a.client_cpus, pids, fio_dir))
                for name, rs in runs.items():
                    r = {m: statistics.median(x[m] for x in rs) for m in rs[0]}
                    results.setdefault(str(k), {}).setdefault(job, {})[name] = r
                    print(f"K={k} {name:12} {job:18} {r['iops']:10.0f} IOPS  p99 {r['p99_us']:8.1f} us  "
                          f"{r['cpu_s_per_mreq']:6.2f} CPU s/Mreq", file=sys.stderr)
        finally:
            for _, procs, _, _ in started:
                for p in procs:
                    p.send_signal(signal.SIGTERM)
            for _, procs, _, cleanup in started:
                for p in procs:
                    p.wait(timeout=60)
                cleanup()
    print(f"\n{'K':>2} {'job':18} {'server':12} {'IOPS':>9} {'p99 us':>8} {'CPU s/Mreq':>10}   IOPS and CPU/req vs tiervisor at --threads K")
    for k, jobs in results.items():
        ref_name = f"tv-threads{k}" if int(k) > 1 else "tv-threads1"
        for job, by in jobs.items():
            ref = by[ref_name]
            for name, r in by.items():
                ratio = f"{r['iops'] / ref['iops']:.2f}x  {r['cpu_s_per_mreq'] / max(ref['cpu_s_per_mreq'], 1e-9):.2f}x"
                print(f"{k:>2} {job:18} {name:12} {r['iops']:9.0f} {r['p99_us']:8.1f} {r['cpu_s_per_mreq']:10.2f}   {ratio}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    shutil.rmtree(fio_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
