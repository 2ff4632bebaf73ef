#!/usr/bin/env bash
# Fuzz the NBD handshake and request parser, the on-disk decoders and the trace readers with cargo-fuzz
# (libFuzzer), each target for a time budget, and print executions per target.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every target)
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 0 TARGET...        (a number of executions instead)
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`); installs
# cargo-fuzz when missing. Seeds are in fuzz/seeds/TARGET (committed, small); what the
# fuzzer finds goes to fuzz/corpus/TARGET (not committed). A crash leaves its input in
# fuzz/artifacts/TARGET: turn it into a regression test in the crate that failed.
# Sanitizers are off (-s none): the code is safe Rust, so the fuzzer looks for panics,
# aborts and the targets' own assertions, and runs several times faster without ASan.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

budget="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(nbd_handshake nbd_requests superblock volume_table journal checkpoint trace)
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal

cargo +nightly fuzz build -s none
# Stop each target after FUZZ_RUNS executions when set (the issue's 10 M), else after the budget.
if [ -n "${FUZZ_RUNS:-}" ]; then limit=(-runs="$FUZZ_RUNS"); else limit=(-max_total_time="$budget"); fi
status=0
printf '%-14s %12s %10s %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "seeds/$t"
  log="$(mktemp)"
  if cargo +nightly fuzz run -s none "$t" "corpus/$t" "seeds/$t" -- \
      "${limit[@]}" -max_len=70000 -rss_limit_mb=1024 -print_final_stats=1 \
      >"$log" 2>&1; then
    result=ok
  else
    result="CRASH (see fuzz/artifacts/$t and $log)"
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  printf '%-14s %12s %10s %s\n' "$t" "$execs" "$rate" "$result"
  [ "$result" = ok ] && rm -f "$log"
done
exit $status
