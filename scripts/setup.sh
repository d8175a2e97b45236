#!/usr/bin/env bash
# Installs everything sluice needs to build, test and run on Debian 12:
# DPDK 22.11 (libdpdk-dev, dpdk-dev for dpdk-testpmd), libclang for bindgen,
# pkg-config, the tools the tests and the demo use, BIRD 2 (the scale-out
# suite's routers and the BGP announcement, docs/scale-out.md), and dpkg-dev
# (dpkg-shlibdeps) for scripts/package/build-deb.sh, lintian for
# scripts/package/test-deb.sh, and prometheus for promtool (the shipped
# alerts' checks and unit tests). Idempotent: when everything is present
# it changes nothing.
set -euo pipefail

PKGS=(libdpdk-dev dpdk-dev dpdk libclang-dev clang pkg-config libpcap-dev
      iproute2 tcpdump python3 curl procps iputils-ping ethtool dpkg-dev bird2
      prometheus lintian)

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

# The appliance image (scripts/image/build.sh) and its boot test
# (scripts/image/boot-test.sh, run by scripts/test.sh): mmdebstrap,
# vfat/ext4/GPT tools, OVMF, QEMU, an SSH client into the VM. Only with
# --image: the demo needs none of it, and QEMU must come from the suite the
# installed qemu-utils came from.
if [[ " $* " == *" --image "* ]]; then
  IMAGE_PKGS=(mmdebstrap dosfstools mtools e2fsprogs fdisk ovmf curl openssh-client)
  missing=()
  for p in "${IMAGE_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  # qemu-system-x86 must be the version of the qemu-utils already installed:
  # machines that come with qemu-utils from bookworm-backports cannot take
  # bookworm's qemu-system-x86 (it conflicts with the newer qemu-utils), so it
  # comes from bookworm-backports too (the source is added when missing).
  if ! dpkg-query -W -f='${Status}' qemu-system-x86 2>/dev/null | grep -q "install ok installed"; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    qver=$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null || true)
    if [[ "$qver" == *bpo12* ]]; then
      if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "setup: adding bookworm-backports (qemu-utils $qver is from it)"
        printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
          'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' |
          $SUDO tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null
      fi
      $SUDO apt-get update -q
      echo "setup: installing qemu-system-x86=$qver from bookworm-backports"
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
        -t bookworm-backports "qemu-system-x86=$qver"
    else
      echo "setup: installing qemu-system-x86"
      $SUDO apt-get update -q
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends qemu-system-x86 qemu-utils
    fi
  fi
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
