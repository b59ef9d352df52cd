#!/usr/bin/env bash
# Runs every libFuzzer target for N seconds each (default 60): `fuzz/run.sh [seconds]`.
#
# cargo-fuzz needs nightly compiler flags (sanitizers, coverage instrumentation);
# RUSTC_BOOTSTRAP=1 lets the stable toolchain take them. Needs `cargo install cargo-fuzz`.
# Findings go to fuzz/artifacts/<target>/, the growing corpus to fuzz/corpus/<target>/ (both
# ignored by git); a finding is turned into a regression test beside the code it breaks.
# Exits non-zero when any target found a failure.
set -uo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
# Its own target dir: instrumented builds share nothing with the service's.
unset CARGO_TARGET_DIR
export RUSTC_BOOTSTRAP=1
cargo fuzz build --release || exit 2
mkdir -p logs
status=0
for target in $(cargo fuzz list); do
    log="logs/$target.log"
    cargo fuzz run --release "$target" -- -max_total_time="$seconds" -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1
    code=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    if [ "$code" -ne 0 ]; then
        echo "!! $target: failure after ${seconds}s, see fuzz/$log and fuzz/artifacts/$target/"
        grep -m 3 -E "panicked|SUMMARY|ERROR" "$log"
        status=1
    else
        echo "ok $target: ${runs:-?} inputs in ${seconds}s, nothing found"
    fi
done
exit $status
