#!/usr/bin/env bash
# Installs everything sluice needs to build, test and run on Debian 12:
# DPDK 22.11 (libdpdk-dev, dpdk-dev for dpdk-testpmd), libclang for bindgen,
# pkg-config, the tools the tests and the demo use, and dpkg-dev
# (dpkg-shlibdeps) for scripts/package/build-deb.sh. Idempotent: when
# everything is present it changes nothing.
set -euo pipefail

PKGS=(libdpdk-dev dpdk-dev dpdk libclang-dev clang pkg-config libpcap-dev
      iproute2 tcpdump python3 curl procps iputils-ping ethtool dpkg-dev)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
else
  echo "setup: system packages present"
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found: install Rust stable with rustup (https://rustup.rs)" >&2
  exit 1
fi
if command -v rustup >/dev/null; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
# The fuzz smoke (scripts/fuzz-smoke.sh) runs the fuzz targets with cargo-fuzz.
cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
pkg-config --atleast-version=22.11 libdpdk || { echo "setup: DPDK >= 22.11 not found by pkg-config" >&2; exit 1; }
echo "setup: ok (DPDK $(pkg-config --modversion libdpdk), $(cargo --version))"
