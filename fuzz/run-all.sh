#!/usr/bin/env bash
# Builds every fuzz target and runs each for SECONDS (default 30), one after another, on a
# scratch corpus (fuzz/target/corpus-work/<target>, gitignored, kept between runs) seeded from
# fuzz/corpus/<target>. Exits non-zero if any target finds anything (crash, failed check,
# timeout, out of memory); its log and the crashing input are printed.
#
#   bash fuzz/run-all.sh 30       # CI: about 30 s per target
#   bash fuzz/run-all.sh 3600     # an hour per target
#
# Stable toolchain: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its nightly-only flags. Targets are
# built with debug assertions and overflow checks (-a). The sanitizer defaults to none:
# tickwheel forbids unsafe code, so AddressSanitizer finds nothing there and costs about 4x
# in speed; FUZZ_SANITIZER=address turns it back on.
set -euo pipefail
seconds="${1:-30}"
sanitizer="${FUZZ_SANITIZER:-none}"
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

targets=$(cargo fuzz list)
cargo fuzz build -a -s "$sanitizer"

failed=()
for target in $targets; do
  work="target/corpus-work/$target"
  log="target/$target.log"
  mkdir -p "$work" "corpus/$target"
  echo "== $target: ${seconds}s =="
  if cargo fuzz run -a -s "$sanitizer" "$target" "$work" "corpus/$target" -- \
      -max_total_time="$seconds" -max_len=4096 -timeout=20 -rss_limit_mb=2048 \
      -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^#[0-9]+.*(DONE|cov:)' "$log" | tail -n 1 || true
    grep -E '^stat::number_of_executed_units' "$log" || true
  else
    echo "!! $target found something; its log is $log:"
    grep -m 1 -A 3 'panicked at' "$log" || true
    tail -n 60 "$log"
    failed+=("$target")
  fi
done

if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz findings in: ${failed[*]} (inputs in fuzz/artifacts/<target>/;" \
    "'cargo fuzz fmt <target> <input>' prints one as an op list)"
  exit 1
fi
echo "fuzz: every target ran ${seconds}s without a finding"
