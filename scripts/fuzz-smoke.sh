#!/usr/bin/env bash
# A short fuzz run of every target in fuzz/ (seconds, not minutes): a
# regression smoke, not a campaign. Seeds: fuzz/seeds, plus the frames of
# the shared tcpdump corpus (../shared/corpus/tcpdump, or $SLUICE_CORPUS)
# when it exists; a clean clone on CI has only the former. A crash, a failed assertion, a
# leak or a timeout fails the run; libFuzzer leaves the input in
# fuzz/artifacts/<target>/ (replay: cargo fuzz run -s none <target> <file>).
#
# FUZZ_SECONDS: time per target (default 5); FUZZ_TARGETS: which (default
# all). cargo-fuzz is installed by scripts/setup.sh; `-s none` builds without a sanitizer, on stable Rust.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-5}
work=$(mktemp -d /tmp/sluice-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT

pcaps=()
corpus=${SLUICE_CORPUS:-../shared/corpus/tcpdump}
if [ -d "$corpus" ]; then
  pcaps=(--pcaps "$corpus")
else
  echo "fuzz-smoke: $corpus absent, fuzz/seeds only"
fi
python3 scripts/fuzz-seeds.py "$work/seeds" --seeds fuzz/seeds "${pcaps[@]}"

cargo fuzz build -s none
for target in ${FUZZ_TARGETS:-$(cargo fuzz list)}; do
  echo "== fuzz $target (${FUZZ_SECONDS}s)"
  mkdir -p "$work/corpus/$target" "$work/seeds/$target"
  log="$work/$target.log"
  if ! cargo fuzz run -s none "$target" "$work/corpus/$target" "$work/seeds/$target" -- \
    -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$log" 2>&1; then
    grep -E -A3 'panicked|ERROR: libFuzzer' "$log" | head -n 20 >&2 || tail -n 40 "$log" >&2
    echo "fuzz-smoke: $target failed; the input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
  grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$log" || true
done
echo "fuzz-smoke: all targets passed"
