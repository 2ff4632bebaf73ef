#!/usr/bin/env python3
"""Seed 002 steady state in simulation: 4 KiB random writes keep overwriting a volume
that fills 80 % of its pool's log space (scenarios/logwrite-steady/), with the greedy
and the cost-benefit cleaner, under uniform and zoned 80/20 overwrites. Prints, per run,
the whole-run and last-quarter write throughput, the log's write amplification, the SSD
model's own write amplification, and mean throughput over each 10 simulated seconds while the writer runs.

Usage: bench/log_steady.py
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_peers import ROOT, tiervisor_bin  # noqa: E402


def main():
    d = os.path.join(ROOT, "scenarios", "logwrite-steady")
    print(f"{'cleaner':<13} {'overwrites':<10} {'MB/s':>6} {'last 1/4':>8} {'log WAF':>8} {'SSD WAF':>8}  MB/s, 10 s means")
    for dist in ["uniform", "zoned"]:
        for policy in ["greedy", "cost-benefit"]:
            out = subprocess.run([tiervisor_bin(), "sim", os.path.join(d, f"{policy}-{dist}.toml"), "--json"],
                                 capture_output=True, text=True, check=True).stdout
            j = json.loads(out)
            v = j["vms"]["writer"]
                        # Only while the writer ran (the cleaner may go on a little after it).
            tl = [s for s in j["timeline"] if s["t_s"] <= v["exec_time_s"]]
            last = tl[len(tl) * 3 // 4:]
            last_mbps = sum(s["write_mb_per_s"] for s in last) / max(1, len(last))
            windows = [tl[i:i + 10] for i in range(0, len(tl), 10)]
            every = " ".join(f"{sum(s['write_mb_per_s'] for s in w) / len(w):.0f}" for w in windows)
            print(f"{policy:<13} {dist:<10} {v['write_bytes'] / v['exec_time_s'] / 1e6:>6.1f} {last_mbps:>8.1f} "
                  f"{j['logs']['ssd']['write_amplification']:>8.3f} {j['devices']['ssd']['waf']:>8.3f}  {every}")


if __name__ == "__main__":
    main()
