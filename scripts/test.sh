#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit/property tests, golden pcaps
# through the real binary on real DPDK (net_pcap, --no-huge), config checks.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo build (the sluice binary the golden tests run)"
cargo build --workspace --all-targets --locked

echo "== cargo test"
mkdir -p target
cargo test --workspace --locked 2>&1 | tee target/test-output.txt

echo "== sluice check-config conf/*.toml"
target/debug/sluice check-config conf/*.toml

passed=$(awk '/^test result:/ {s += $4} END {print s + 0}' target/test-output.txt)
failed=$(awk '/^test result:/ {s += $6} END {print s + 0}' target/test-output.txt)
echo "test.sh: all passed"
echo "tests: $passed passed, $failed failed"
