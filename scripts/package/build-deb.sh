#!/usr/bin/env bash
# Builds the sluice Debian package with dpkg-deb:
#   target/debian/sluice_<version>-1_<arch>.deb
# It installs /usr/bin/sluice, /etc/sluice/sluice.toml (a conffile),
# /lib/systemd/system/sluice.service and the docs. Depends are derived from
# the binary: dpkg-shlibdeps over its NEEDED entries (librte-* packages and
# libc), plus the DPDK driver plugins every sluice loads at run time
# (mempool ring, vdev and PCI buses, net_tap), found with dpkg -S.
#
# Usage: scripts/package/build-deb.sh [--profile release|dev] [--no-build] [--out DIR]
#   --profile dev packages the debug build (tests: no LTO build needed);
#   the shipped package is the release build (the default).
#   --no-build packages the binary already in target/<profile>/, which
#   must be a product build (`cargo build -p controlplane --bin sluice`):
#   one with the golden tests' hooks is refused.
# Needs what scripts/setup.sh installs (dpkg-dev, DPDK, Rust).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=scripts/package/files

profile=release
out=target/debian
build=1
while (($#)); do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "build-deb.sh: unknown argument $1 (--profile release|dev, --out DIR)" >&2; exit 2 ;;
  esac
done
case "$profile" in
  release) bindir=target/release ;;
  dev) bindir=target/debug ;;
  *) echo "build-deb.sh: --profile is release or dev, not $profile" >&2; exit 2 ;;
esac

for tool in dpkg-deb dpkg-shlibdeps readelf objcopy; do
  command -v "$tool" >/dev/null || { echo "build-deb.sh: $tool missing: run scripts/setup.sh" >&2; exit 1; }
done

upstream=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
version="$upstream-1"
arch=$(dpkg --print-architecture)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

if ((build)); then
  echo "build-deb: cargo build --profile $profile (sluice $upstream)"
  cargo build --locked --profile "$profile" -p controlplane --bin sluice
fi
[ -x "$bindir/sluice" ] || { echo "build-deb.sh: no $bindir/sluice (build it, or drop --no-build)" >&2; exit 1; }
# The golden tests' hooks (controlplane's `test-hooks` feature) are never
# shipped. Cargo turns the feature on in any build that includes the
# controlplane's tests (`cargo test`, `--all-targets`), so a binary left
# in target/ by one of those has them; the build above never does.
if grep -qaF 'test-fail-launch-of-worker' "$bindir/sluice"; then
  echo "build-deb.sh: $bindir/sluice was built with the test hooks (cargo test or --all-targets);" \
    "rebuild it with: cargo build --locked --profile $profile -p controlplane --bin sluice" >&2
  exit 1
fi
# Reproducible: file dates and the changelog from the last commit (set
# after the build: build scripts watching it would rebuild everything).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
doc=$root/usr/share/doc/sluice

install -d "$root/DEBIAN" "$root/usr/bin" "$root/etc/sluice" "$root/lib/systemd/system" "$doc/examples"
objcopy --strip-debug "$bindir/sluice" "$root/usr/bin/sluice"
chmod 0755 "$root/usr/bin/sluice"
install -m 0644 "$here/sluice.toml" "$root/etc/sluice/sluice.toml"
install -m 0644 "$here/sluice.service" "$root/lib/systemd/system/sluice.service"
install -m 0644 "$here/copyright" "$doc/copyright"
install -m 0644 README.md "$doc/README.md"
for d in deployment operations configuration architecture; do
  gzip -9n <"docs/$d.md" >"$doc/$d.md.gz"
done
install -m 0644 conf/*.toml "$doc/examples/"
{
  echo "sluice ($version) unstable; urgency=medium"
  echo
  echo "  * sluice $upstream, built from commit $commit."
  echo
  echo " -- sluice maintainers <maintainers@sluice.invalid>  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$doc/changelog.Debian.gz"
for s in postinst prerm postrm; do
  install -m 0755 "$here/$s" "$root/DEBIAN/$s"
done
echo /etc/sluice/sluice.toml >"$root/DEBIAN/conffiles"

# Libraries the binary links: dpkg-shlibdeps maps each NEEDED entry to its
# package and minimum version (from the packages' shlibs/symbols files).
mkdir -p "$stage/src/debian"
printf 'Source: sluice\n\nPackage: sluice\nArchitecture: any\n' >"$stage/src/debian/control"
shlibs=$(cd "$stage/src" && dpkg-shlibdeps -O "$root/usr/bin/sluice" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "build-deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

# DPDK loads its drivers as plugins (not NEEDED): the ones sluice always
# uses, by the ABI of the librte_eal it links.
abi=$(readelf -d "$root/usr/bin/sluice" | sed -n 's/.*\[librte_eal\.so\.\([0-9.]*\)\].*/\1/p')
[ -n "$abi" ] || { echo "build-deb.sh: the binary does not link librte_eal" >&2; exit 1; }
dpdk_min=$(pkg-config --modversion libdpdk | cut -d. -f1,2)
plugin_pkg() {
  local p
  p=$(dpkg -S "*/librte_$1.so.$abi" 2>/dev/null | head -1 | cut -d: -f1)
  [ -n "$p" ] || { echo "build-deb.sh: no installed package ships librte_$1.so.$abi" >&2; exit 1; }
  echo "$p (>= $dpdk_min)"
}
plugins=""
for lib in mempool_ring bus_vdev bus_pci net_tap; do
  plugins+=", $(plugin_pkg "$lib")"
done
nic_pmds=""
for lib in net_virtio net_af_packet; do
  nic_pmds+=", $(plugin_pkg "$lib")"
done

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: sluice
Version: $version
Architecture: $arch
Maintainer: sluice maintainers <maintainers@sluice.invalid>
Installed-Size: $size
Depends: $shlibs$plugins, iproute2, init-system-helpers (>= 1.54~)
Recommends: dpdk$nic_pmds
Suggests: dpdk-dev
Section: net
Priority: optional
Description: kernel-bypass layer-4 load balancer appliance on DPDK
 sluice receives packets for virtual IPs, picks a backend with weighted
 Maglev consistent hashing, tracks connections per core and delivers
 packets to backends by layer-2 direct server return, GRE, IP-in-IP or
 GUE. A TAP interface carries the appliance's own traffic (ARP, ping,
 health checks) through the kernel.
 .
 This package ships the sluice binary, the systemd unit (Type=notify,
 watchdog, reload) and an example /etc/sluice/sluice.toml. Hugepages and
 NIC binding come from the dpdk package's dpdk.service.
CONTROL

find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$out"
deb="$out/sluice_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "build-deb: $deb ($(du -h "$deb" | cut -f1))"
echo "build-deb: Depends: $(dpkg-deb -f "$deb" Depends)"
