#!/usr/bin/env bash
# tiervisor's whole test suite. Installs the real NBD clients and peers the tests use
# (fio, qemu-utils, libnbd-bin, nbdkit, openssl) and what the booted-guest test needs
# (qemu-system-x86, busybox-static, linux-image-cloud-amd64) from Debian when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v fio >/dev/null || need+=(fio)
{ command -v qemu-io >/dev/null && command -v qemu-img >/dev/null && command -v qemu-nbd >/dev/null; } || need+=(qemu-utils)
command -v nbdinfo >/dev/null || need+=(libnbd-bin)
command -v nbdkit >/dev/null || need+=(nbdkit)
# Certificates for the NBD-over-TLS test (crates/tiervisor/tests/serve_tls.rs).
command -v openssl >/dev/null || need+=(openssl)
# The booted-guest test (crates/tiervisor/tests/guest_vhost.rs): QEMU, a static busybox and
# a kernel for the guest's initramfs.
# qemu-utils with it, in the same command: installing qemu-system-x86 alone can replace a
# newer qemu-utils (from backports) with the release's, or remove it.
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86 qemu-utils)
command -v xz >/dev/null || need+=(xz-utils)
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || need+=(busybox-static)
ls /boot/vmlinuz-*-cloud-amd64 >/dev/null 2>&1 || need+=(linux-image-cloud-amd64)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  # One command, so qemu-system-x86 and qemu-utils come from the same release. Where the
  # preinstalled qemu-utils came from backports (newer than the release's), the release's
  # qemu-system-x86 cannot go with it: take them from backports, adding Debian's backports
  # suite when it is not configured (a fresh machine of this kind has it installed from,
  # but not configured).
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null; then
    backports="$(. /etc/os-release && echo "$VERSION_CODENAME")-backports"
    if ! apt-cache policy | grep -q "$backports"; then
      echo "test.sh: adding Debian's $backports suite"
      echo "deb http://deb.debian.org/debian $backports main" |
        $SUDO tee /etc/apt/sources.list.d/tiervisor-backports.list >/dev/null
      $SUDO apt-get update -qq
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t "$backports" "${need[@]}" >/dev/null
  fi
fi

cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
# Release optimisation without LTO, with overflow checks and debug assertions
# ([profile.ci-checked]): the tests need the speed, not the whole-program link per test
# binary, and one build with the checks covers what a release test run and a checked run
# of the engine crates did in two (the second cost a third of CI's time).
# --no-fail-fast: one failing test binary must not hide the others' results.
cargo test --profile ci-checked --workspace --no-fail-fast
# The serve tests once more with two shards in every server (issue 18: --threads 2). The
# binaries are built by now, so this adds only their run time (docs/TESTING.md); with
# --workspace, as above, so cargo resolves the same features and builds nothing again.
serve_tests=()
for f in crates/tiervisor/tests/serve*.rs; do serve_tests+=(--test "$(basename "$f" .rs)"); done
TIERVISOR_TEST_THREADS=2 cargo test --profile ci-checked --workspace --no-fail-fast "${serve_tests[@]}"
# The fuzz targets on their committed seeds and every past crash (fuzz/tests/seeds.rs), so
# the targets keep compiling against the crates and a crash once found stays fixed. fuzz/
# is a workspace of its own (cargo-fuzz builds it with nightly flags); about 2 CPU-minutes.
cargo test --manifest-path fuzz/Cargo.toml --target-dir target/fuzz-test
