#!/usr/bin/env bash
# tiervisor's whole test suite. Installs the real NBD clients and peers the tests use
# (fio, qemu-utils, libnbd-bin, nbdkit) from Debian when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v fio >/dev/null || need+=(fio)
{ command -v qemu-io >/dev/null && command -v qemu-img >/dev/null && command -v qemu-nbd >/dev/null; } || need+=(qemu-utils)
command -v nbdinfo >/dev/null || need+=(libnbd-bin)
command -v nbdkit >/dev/null || need+=(nbdkit)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
# Release optimisation without LTO ([profile.ci-release]): the tests need the speed, not the
# whole-program link per test binary.
cargo test --profile ci-release --workspace
# The engine, model, workload and simulator tests (DST included) once more with overflow
# checks and debug assertions, which the run above leaves out ([profile.ci-checked]).
cargo test --profile ci-checked -p tiervisor-engine -p tiervisor-model -p tiervisor-workload -p tiervisor-sim
