#!/usr/bin/env python3
"""fio inside a KVM guest against four disks of the same size, in one boot:

  tv-vhost   a tiervisor volume over vhost-user-blk (tiervisor's backend)
  qsd-vhost  a raw file exported by qemu-storage-daemon over vhost-user-blk (the peer)
  tv-nbd     the same tiervisor server's second volume, through QEMU's NBD client
  raw        a raw file opened by QEMU itself (virtio-blk, aio=io_uring): no external backend

Every disk is filled with random data first, so reads touch data. The guest is the cloud
kernel with a busybox initramfs carrying fio and its libraries; it runs each job on each
disk in turn (the order rotates per repetition) and prints fio's JSON between markers.
The host samples each backend process's CPU time (user + system) when the guest announces
a job and when it ends, so the table gives server CPU microseconds per request beside IOPS.

Needs /dev/kvm, qemu-system-x86_64, qemu-storage-daemon, qemu-img, fio, busybox-static and
linux-image-cloud-amd64. On a 2-core machine the guest's vCPU, QEMU's I/O thread and the
backend share both cores: compare the rows with each other, not with other machines.

Usage: bench/guest_fio.py [--reps 3] [--runtime 5] [--size-mib 256] [--workdir DIR]
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
DISKS = ["tv-vhost", "qsd-vhost", "tv-nbd", "raw"]
# PCI slots, so the guest can tell the disks apart whatever their serials.
SLOT = {"tv-vhost": 4, "qsd-vhost": 5, "tv-nbd": 6, "raw": 7}
JOBS = [
    # name, rw, iodepth
    ("randread-4k-qd32", "randread", 32),
    ("randwrite-4k-qd32", "randwrite", 32),
    ("randread-4k-qd1", "randread", 1),
]


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def tiervisor_bin():
    if os.environ.get("TIERVISOR_BIN"):
        return os.environ["TIERVISOR_BIN"]
    b = os.path.join(ROOT, "target", "release", "tiervisor")
    if not os.path.exists(b):
        subprocess.run(["cargo", "build", "--release", "-p", "tiervisor"], cwd=ROOT, check=True)
    return b


def cpio_entry(out, ino, name, mode, data):
    nb = name.encode() + b"\0"
    hdr = "070701" + "".join(f"{v:08x}" for v in [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0])
    out += hdr.encode() + nb
    out += b"\0" * (-len(out) % 4)
    out += data
    out += b"\0" * (-len(out) % 4)


def libraries(exe):
    out = subprocess.run(["ldd", exe], capture_output=True, text=True, check=True).stdout
    libs = set()
    for line in out.splitlines():
        m = re.search(r"=> (/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            libs.add(m.group(1))
    return sorted(libs)


INIT = r"""#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
insmod /virtio_blk.ko
for d in /sys/block/vd*; do echo "TV-DISK ${d##*/} $(readlink -f $d/device/..)"; done
for line in $(cat /jobs); do
  disk=${line%%:*}; rest=${line#*:}; slot=${rest%%:*}; rest=${rest#*:}
  job=${rest%%:*}; rest=${rest#*:}; rw=${rest%%:*}; qd=${rest#*:}
  dev=""
  for d in /sys/block/vd*; do
    case "$(readlink -f $d/device/..)" in *:00:0$slot.0) dev=/dev/${d##*/};; esac
  done
  if [ -z "$dev" ]; then echo "TV-NODEV $disk"; continue; fi
  echo "TV-START $disk $job"
  LD_LIBRARY_PATH=/lib:/lib64 /fio --name=$job --filename=$dev --direct=1 --ioengine=libaio --thread \
    --rw=$rw --bs=4k --iodepth=$qd --runtime=@RUNTIME@ --time_based --randrepeat=1 \
    --output-format=json --output=/tmp/out.json >/dev/null 2>&1
  echo "TV-END $disk $job"
  echo "TV-JSON-BEGIN"; tr -d '\n' < /tmp/out.json; echo; echo "TV-JSON-END"
done
echo TV-DONE
poweroff -f
"""


def initramfs(path, runtime, order):
    kernels = sorted(glob.glob("/boot/vmlinuz-*-cloud-amd64"))
    if not kernels:
        raise SystemExit("no /boot/vmlinuz-*-cloud-amd64 (apt-get install linux-image-cloud-amd64)")
    kernel = kernels[-1]
    version = os.path.basename(kernel)[len("vmlinuz-"):]
    mod = f"/lib/modules/{version}/kernel/drivers/block/virtio_blk.ko.xz"
    module = subprocess.run(["xz", "-dc", mod], capture_output=True, check=True).stdout
    fio = shutil.which("fio")
    a = bytearray()
    ino = 1
    dirs = ["bin", "lib", "lib64"]
    for d in dirs:
        cpio_entry(a, ino, d, 0o040755, b"")
        ino += 1
    files = [("bin/busybox", 0o100755, open("/bin/busybox", "rb").read()),
             ("init", 0o100755, INIT.replace("@RUNTIME@", str(runtime)).encode()),
             ("virtio_blk.ko", 0o100644, module),
             ("fio", 0o100755, open(fio, "rb").read())]
    jobs = " ".join(f"{d}:{SLOT[d]}:{j}:{rw}:{qd}" for j, rw, qd in JOBS for d in order)
    files.append(("jobs", 0o100644, jobs.encode()))
    for lib in libraries(fio):
        name = os.path.basename(lib)
        where = "lib64" if "ld-linux" in name else "lib"
        files.append((f"{where}/{name}", 0o100755, open(os.path.realpath(lib), "rb").read()))
    for name, mode, data in files:
        cpio_entry(a, ino, name, mode, data)
        ino += 1
    cpio_entry(a, ino, "TRAILER!!!", 0, b"")
    with open(path, "wb") as f:
        f.write(a)
    return kernel


def wait_path(p, timeout=30):
    t = time.time() + timeout
    while not os.path.exists(p):
        if time.time() > t:
            raise SystemExit(f"{p} did not appear")
        time.sleep(0.05)


def fill_random(path, size):
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(os.urandom(1 << 20))


def start_tiervisor(work, size_mib):
    d = os.path.join(work, "tv")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    pool = 2 * size_mib + 64
    cfg = os.path.join(d, "tv.toml")
    with open(cfg, "w") as f:
        f.write(f"""unix_socket = "nbd.sock"
vhost_user_dir = "vhost"
[[pool]]
name = "data"
path = "data.pool"
size = "{pool}m"
kind = "ssd"
[[volume]]
name = "vm1"
size = "{size_mib}m"
pool = "data"
provisioning = "thick"
[[volume]]
name = "vm2"
size = "{size_mib}m"
pool = "data"
provisioning = "thick"
""")
    p = subprocess.Popen([tiervisor_bin(), "serve", "--config", cfg, "--data-dir", d, "--format-new",
                          "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    nbd = os.path.join(d, "nbd.sock")
    wait_path(nbd)
    wait_path(os.path.join(d, "vhost", "vm1.sock"))
    src = os.path.join(work, "fill.raw")
    for vol in ["vm1", "vm2"]:
        subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src,
                        f"nbd+unix:///{vol}?socket={nbd}"], check=True)
    return p, os.path.join(d, "vhost", "vm1.sock"), nbd


def start_qsd(work, size_mib):
    raw = os.path.join(work, "qsd.raw")
    shutil.copyfile(os.path.join(work, "fill.raw"), raw)
    sock = os.path.join(work, "qsd.sock")
    if os.path.exists(sock):
        os.remove(sock)
    p = subprocess.Popen(["qemu-storage-daemon",
                          "--blockdev", f"driver=file,node-name=f,filename={raw},aio=io_uring,cache.direct=off",
                          "--export", f"type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path={sock},"
                                      "writable=on,num-queues=1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_path(sock)
    return p, sock


def boot(work, kernel, initrd, tv_vhost, qsd_sock, nbd_sock, raw, mem_mib, accel):
    args = ["qemu-system-x86_64", "-accel", accel, "-smp", "1", "-m", str(mem_mib),
            "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
            "-kernel", kernel, "-initrd", initrd, "-append", "console=ttyS0 quiet panic=-1",
            "-object", f"memory-backend-memfd,id=mem,size={mem_mib}M,share=on", "-numa", "node,memdev=mem",
            "-chardev", f"socket,id=c1,path={tv_vhost}",
            "-device", f"vhost-user-blk-pci,chardev=c1,num-queues=1,addr={SLOT['tv-vhost']:#x}",
            "-chardev", f"socket,id=c2,path={qsd_sock}",
            "-device", f"vhost-user-blk-pci,chardev=c2,num-queues=1,addr={SLOT['qsd-vhost']:#x}",
            "-drive", f"file=nbd+unix:///vm2?socket={nbd_sock},format=raw,if=none,id=n0",
            "-device", f"virtio-blk-pci,drive=n0,addr={SLOT['tv-nbd']:#x}",
            "-drive", f"file={raw},format=raw,if=none,id=r0,aio=io_uring",
            "-device", f"virtio-blk-pci,drive=r0,addr={SLOT['raw']:#x}"]
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=5)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--mem-mib", type=int, default=512)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--accel", default="kvm", choices=["kvm", "tcg"],
                    help="tcg only checks that the bench runs: its IOPS are the emulator's")
    a = ap.parse_args()
    for tool in ["qemu-system-x86_64", "qemu-storage-daemon", "qemu-img", "fio", "xz"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing (apt-get install qemu-system-x86 qemu-utils fio xz-utils)")
    if a.accel == "kvm" and not os.access("/dev/kvm", os.R_OK | os.W_OK):
        raise SystemExit("no usable /dev/kvm: fio in a TCG guest measures the emulator, not the disk")
    if not os.path.exists("/bin/busybox"):
        raise SystemExit("no /bin/busybox (apt-get install busybox-static)")
    work = a.workdir or tempfile.mkdtemp(prefix="tv-guest-fio-")
    os.makedirs(work, exist_ok=True)
    size = a.size_mib << 20
    fill_random(os.path.join(work, "fill.raw"), size)
    raw = os.path.join(work, "qemu.raw")
    shutil.copyfile(os.path.join(work, "fill.raw"), raw)
    results = {}
    procs = []
    try:
        tv, tv_vhost, nbd = start_tiervisor(work, a.size_mib)
        procs.append(tv)
        qsd, qsd_sock = start_qsd(work, a.size_mib)
        procs.append(qsd)
        for rep in range(a.reps):
            order = DISKS[rep % len(DISKS):] + DISKS[:rep % len(DISKS)]
            initrd = os.path.join(work, "initramfs.cpio")
            kernel = initramfs(initrd, a.runtime, order)
            g = boot(work, kernel, initrd, tv_vhost, qsd_sock, nbd, raw, a.mem_mib, a.accel)
            # The backend whose CPU a disk's requests cost: tiervisor for both of its
            # transports, the daemon for its export, QEMU itself for the raw file.
            owner = {"tv-vhost": tv.pid, "tv-nbd": tv.pid, "qsd-vhost": qsd.pid, "raw": g.pid}
            started, console = {}, []
            collecting, cur = False, None
            deadline = time.time() + 120 + len(DISKS) * len(JOBS) * (a.runtime + 10)
            log = open(os.path.join(work, f"console-{rep}.log"), "w")
            for line in g.stdout:
                console.append(line)
                log.write(line)
                log.flush()
                line = line.strip()
                if line.startswith("TV-START "):
                    _, disk, job = line.split()
                    started[(disk, job)] = cpu_s(owner[disk])
                elif line.startswith("TV-END "):
                    _, disk, job = line.split()
                    cur = (disk, job, cpu_s(owner[disk]) - started[(disk, job)])
                elif line == "TV-JSON-BEGIN":
                    collecting = True
                elif line == "TV-JSON-END":
                    collecting = False
                elif collecting and cur:
                    j = json.loads(line)["jobs"][0]
                    d = j["read"] if "read" in cur[1] else j["write"]
                    ios = max(d["total_ios"], 1)
                    p99 = d["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000.0
                    results.setdefault((cur[0], cur[1]), []).append((d["iops"], p99, cur[2] / ios * 1e6))
                    cur = None
                elif line == "TV-DONE" or time.time() > deadline:
                    break
            g.wait(timeout=60)
            if "KVM internal error" in "".join(console):
                raise SystemExit("KVM could not run the guest (nested virtualisation?); console:\n"
                                 + "".join(console[:5]))
            if not any(k[0] for k in results):
                raise SystemExit("the guest ran no job; console:\n" + "".join(console[-40:]))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'job':18} {'disk':10} {'IOPS':>8} {'p99 us':>8} {'CPU us/req':>10} {'vs qsd':>7}  IOPS runs")
    for job, _, _ in JOBS:
        base = results.get(("qsd-vhost", job))
        b_iops = statistics.median(r[0] for r in base) if base else None
        for disk in DISKS:
            v = results.get((disk, job))
            if not v:
                print(f"{job:18} {disk:10} (no result)")
                continue
            iops = statistics.median(r[0] for r in v)
            ratio = f"{iops / b_iops:7.2f}" if b_iops else "      -"
            print(f"{job:18} {disk:10} {iops:8.0f} {statistics.median(r[1] for r in v):8.0f} "
                  f"{statistics.median(r[2] for r in v):10.1f} {ratio}  {[round(r[0]) for r in v]}")
    print("CPU us/req: the backend's CPU time over the job divided by fio's requests (tiervisor for "
          "tv-vhost and tv-nbd, qemu-storage-daemon for qsd-vhost, the whole QEMU process for raw, "
          "which includes the guest's vCPU)")


if __name__ == "__main__":
    main()
