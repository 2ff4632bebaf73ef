#!/usr/bin/env python3
"""NBD over TLS: tiervisor in plaintext and with TLS, against qemu-nbd and nbdkit with TLS,
serving the same 1 GiB of data, one after the other, driven by the same fio NBD jobs
(libnbd over `nbds://`). Prints IOPS, MB/s and the server's CPU time per request (median
of --reps runs), and the ratios. The server is pinned to CPU 0 and fio to CPU 1, so CPU
time per request is the figure that compares servers when the client caps throughput.

Certificates (a CA and a server certificate for 127.0.0.1) are made with openssl in the
work directory; fio's libnbd finds the CA in $HOME/.pki/libnbd (its default directory), so
HOME is pointed at the work directory for fio. TLS 1.3 is negotiated by every server here
(GnuTLS clients); the cipher is each library's choice (AES-GCM with AES-NI).

Usage: bench/tls_peers.py [--reps 3] [--runtime 5] [--workdir /tmp/tv-bench-tls] [--json out.json]
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
import nbd_peers as peers  # noqa: E402

JOBS = [
    ("randread-4k-qd32", "randread", "4k", 32),
    ("randwrite-4k-qd32", "randwrite", "4k", 32),
    ("read-1m-qd4", "read", "1m", 4),
    ("write-1m-qd4", "write", "1m", 4),
]

PKI_SH = r"""set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca-cert.pem -days 2 -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj "/CN=localhost" 2>/dev/null
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n" > server.ext
openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 2 -extfile server.ext 2>/dev/null
"""


def cpu_s(pid):
    """User plus system CPU seconds of a process and its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pinned(cmd):
    return ["taskset", "-c", "0"] + cmd


def start_tiervisor(work, raw, pki, tls):
    d = os.path.join(work, "tv-tls" if tls else "tv")
    keys = f'tls = "require"\ntls_certificates = "{pki}"\n' if tls else ""
    p, port = peers.serve_config(d, keys + """[[pool]]
name = "data"
path = "data.pool"
size = "1100m"
kind = "ssd"

[[volume]]
name = "vm1"
size = "1g"
pool = "data"
provisioning = "thick"
""")
    scheme = "nbds" if tls else "nbd"
    env = dict(os.environ, HOME=work)
    subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", raw, f"nbd://127.0.0.1:{port}/vm1"]
                   if not tls else
                   ["nbdcopy", raw, f"{scheme}://127.0.0.1:{port}/vm1"], check=True, env=env)
    subprocess.run(["taskset", "-a", "-p", "-c", "0", str(p.pid)], check=True, stdout=subprocess.DEVNULL)
    return p, f"{scheme}://127.0.0.1:{port}/vm1"


def start_qemu_nbd(work, raw, pki):
    port = peers.free_port()
    p = subprocess.Popen(pinned(["qemu-nbd", "-f", "raw", "-x", "vm1", "-t", "--shared=64", "-b", "127.0.0.1", "-p", str(port),
                                 "--object", f"tls-creds-x509,id=tls0,dir={pki},endpoint=server,verify-peer=off",
                                 "--tls-creds", "tls0", raw]),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peers.wait_port(port)
    return p, f"nbds://127.0.0.1:{port}/vm1"


def start_nbdkit(work, raw, pki):
    port = peers.free_port()
    p = subprocess.Popen(pinned(["nbdkit", "-f", "-i", "127.0.0.1", "-p", str(port), "--tls=require",
                                 f"--tls-certificates={pki}", "file", raw]),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peers.wait_port(port)
    return p, f"nbds://127.0.0.1:{port}/"


def run_fio(uri, pid, rw, bs, qd, runtime, home):
    cmd = ["taskset", "-c", "1", "fio", "--name=j", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}",
           f"--iodepth={qd}", f"--size={peers.SIZE}", "--time_based", f"--runtime={runtime}",
           "--randrepeat=1", "--output-format=json", f"--aux-path={peers.FIO_DIR}"]
    c0 = cpu_s(pid)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=peers.FIO_DIR,
                         env=dict(os.environ, HOME=home)).stdout
    cpu = cpu_s(pid) - c0
    j = json.loads(out[out.index("{"):])["jobs"][0]
    d = j["read"] if "read" in rw else j["write"]
    # No ramp: the CPU time and the request count cover the same interval.
    ios = max(j["read"]["total_ios"] + j["write"]["total_ios"], 1)
    return {"iops": d["iops"], "mb_s": d["bw_bytes"] / 1e6, "cpu_us_per_req": cpu / ios * 1e6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/tv-bench-tls")
    ap.add_argument("--json")
    a = ap.parse_args()
    for tool in ["fio", "qemu-nbd", "qemu-img", "nbdkit", "nbdcopy", "openssl", "taskset"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing (apt-get install fio qemu-utils nbdkit libnbd-bin openssl)")
    os.makedirs(a.workdir, exist_ok=True)
    pki = os.path.join(a.workdir, "pki")
    shutil.rmtree(pki, ignore_errors=True)
    os.makedirs(pki)
    subprocess.run(["sh", "-c", PKI_SH], cwd=pki, check=True)
    # libnbd's default certificate directory, for fio (which cannot pass tls-certificates).
    os.makedirs(os.path.join(a.workdir, ".pki", "libnbd"), exist_ok=True)
    shutil.copy(os.path.join(pki, "ca-cert.pem"), os.path.join(a.workdir, ".pki", "libnbd", "ca-cert.pem"))
    raw = os.path.join(a.workdir, "disk.raw")
    if not os.path.exists(raw) or os.path.getsize(raw) != peers.SIZE:
        with open(raw, "wb") as f:
            for _ in range(peers.SIZE >> 20):
                f.write(os.urandom(1 << 20))
    servers = [
        ("tiervisor", lambda: start_tiervisor(a.workdir, raw, pki, False)),
        ("tiervisor-tls", lambda: start_tiervisor(a.workdir, raw, pki, True)),
        ("qemu-nbd-tls", lambda: start_qemu_nbd(a.workdir, raw, pki)),
        ("nbdkit-tls", lambda: start_nbdkit(a.workdir, raw, pki)),
    ]
    results = {}
    for name, start in servers:
        proc, uri = start()
        try:
            for job, rw, bs, qd in JOBS:
                runs = [run_fio(uri, proc.pid, rw, bs, qd, a.runtime, a.workdir) for _ in range(a.reps)]
                results.setdefault(job, {})[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                r = results[job][name]
                print(f"{name:14} {job:18} {r['iops']:10.0f} IOPS {r['cpu_us_per_req']:8.1f} us CPU/req", file=sys.stderr)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    print(f"\n{'job':18} {'server':14} {'IOPS':>9} {'MB/s':>8} {'CPU us/req':>10}   tiervisor-tls/this: IOPS  CPU/req")
    for job, _, _, _ in JOBS:
        tv = results[job]["tiervisor-tls"]
        for name, _ in servers:
            r = results[job][name]
            ratio = "" if name == "tiervisor-tls" else f"{tv['iops'] / r['iops']:.2f}  {tv['cpu_us_per_req'] / r['cpu_us_per_req']:.2f}"
            print(f"{job:18} {name:14} {r['iops']:9.0f} {r['mb_s']:8.1f} {r['cpu_us_per_req']:10.1f}   {ratio}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
