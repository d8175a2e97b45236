#!/usr/bin/env bash
# Builds the sluice appliance: a bootable GPT disk image (UEFI, systemd-boot)
# from Debian 12 packages and the sluice .deb.
#
#   target/image/sluice.img   raw disk: ESP (vfat), SLUICECFG (vfat), root (ext4)
#
# Steps: (1) the root filesystem, every package but sluice, built by
# mmdebstrap and cached as a tarball keyed by the package list and the
# mmdebstrap options; (2) the tarball unpacked, the sluice .deb installed,
# the appliance configured (units, networkd, first-boot config import);
# (3) the partitions made as files (mkfs.vfat + mtools, mkfs.ext4 -d) and
# written into a GPT laid out by sfdisk. No loop device and no mount.
# A rebuild after a code change only repeats (2) and (3).
#
# Usage: scripts/image/build.sh [--deb PATH] [--config FILE] [--out FILE]
#          [--size-slack MiB] [--cmdline-extra "ARGS"] [--no-cache]
#   --deb PATH       the sluice package (default: newest target/debian/sluice_*.deb,
#                    built by scripts/package/build-deb.sh when absent)
#   --config FILE    written to the SLUICECFG partition as sluice.toml: the
#                    appliance copies it to /etc/sluice/sluice.toml at boot
#   --cfg-file FILE  any other file for the SLUICECFG partition (repeatable;
#                    see docs/deployment.md "Appliance image")
#   --cmdline-extra  appended to the kernel command line
#   --no-cache       rebuild the root filesystem tarball even when cached
# Env: SLUICE_IMAGE_CACHE (default target/image-cache), DEBIAN_MIRROR.
# Needs root (the tarball holds root-owned files; dpkg runs in a chroot)
# and what scripts/setup.sh --image installs (mmdebstrap, dosfstools, mtools,
# e2fsprogs, fdisk).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=scripts/image

deb=""
config=""
cfg_files=()
out=target/image/sluice.img
cmdline_extra=""
use_cache=1
while (($#)); do
  case "$1" in
    --deb) deb=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --cfg-file) cfg_files+=("$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --cmdline-extra) cmdline_extra=$2; shift 2 ;;
    --no-cache) use_cache=0; shift ;;
    *) echo "build.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" -eq 0 ] || { echo "build.sh: run as root (root-owned files, chroot dpkg)" >&2; exit 1; }
for tool in mmdebstrap mkfs.vfat mcopy mmd mkfs.ext4 sfdisk dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool missing: run scripts/setup.sh --image" >&2; exit 1; }
done
[ -z "$config" ] || [ -f "$config" ] || { echo "build.sh: --config $config: no such file" >&2; exit 2; }

t0=$(date +%s)
step() { echo "image: [$(($(date +%s) - t0))s] $*"; }

# --- the package -----------------------------------------------------------
if [ -z "$deb" ]; then
  deb=$(ls -t target/debian/sluice_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    [ -x scripts/package/build-deb.sh ] || { echo "build.sh: no target/debian/sluice_*.deb and no scripts/package/build-deb.sh: pass --deb PATH" >&2; exit 1; }
    step "building the package (scripts/package/build-deb.sh)"
    scripts/package/build-deb.sh
    deb=$(ls -t target/debian/sluice_*.deb | head -1)
  fi
fi
[ -f "$deb" ] || { echo "build.sh: --deb $deb: no such file" >&2; exit 2; }
step "package $deb"

# --- (1) root filesystem, cached by package list ---------------------------
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Everything the appliance runs, plus the sluice package's own Depends (so
# installing the .deb later needs no network), plus the DPDK PMDs for the
# NICs an appliance meets (the dpdk package does not pull them in).
base_pkgs=(linux-image-amd64 initramfs-tools systemd systemd-sysv udev dbus kmod e2fsprogs
  systemd-boot-efi dpdk pciutils iproute2 iputils-ping procps openssh-server
  less ca-certificates man-db bash-completion
  librte-net-virtio23 librte-net-ixgbe23 librte-net-i40e23 librte-net-ice23
  librte-net-e1000-23 librte-net-vmxnet3-23)
deb_deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/(.*)//; s/|.*//; s/[[:space:]]//g' | grep . || true)
mapfile -t pkgs < <(printf '%s\n' "${base_pkgs[@]}" $deb_deps | sort -u)
mm_opts=(--variant=minbase --architectures=amd64 --components=main
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-include=/usr/share/man/man1/sluice*'
  --aptopt='APT::Install-Recommends "false"')
mirrors=("deb $mirror $suite main" "deb $mirror $suite-updates main"
  "deb http://deb.debian.org/debian-security $suite-security main")
cache=${SLUICE_IMAGE_CACHE:-target/image-cache}
key=$(printf '%s\n' "rootfs-v1" "$suite" "${mirrors[@]}" "${mm_opts[@]}" "${pkgs[@]}" | sha256sum | cut -c1-16)
tarball=$cache/rootfs-$key.tar
mkdir -p "$cache"
if ((use_cache)) && [ -s "$tarball" ]; then
  step "root filesystem: cached $tarball"
else
  step "root filesystem: mmdebstrap ${#pkgs[@]} packages -> $tarball (not cached)"
  mmdebstrap --quiet --format=tar "${mm_opts[@]}" --include="$(IFS=,; echo "${pkgs[*]}")" \
    "$suite" "$tarball.tmp" "${mirrors[@]}"
  mv "$tarball.tmp" "$tarball"
  printf '%s\n' "${pkgs[@]}" >"$cache/rootfs-$key.packages"
  step "root filesystem built"
fi

# --- (2) unpack, install sluice, configure ----------------------------------
work=target/image/work
rm -rf "$work"
mkdir -p "$work/root" "$(dirname "$out")"
root=$work/root
tar --numeric-owner --xattrs --xattrs-include='*' -xpf "$tarball" -C "$root"
cp "$deb" "$root/tmp/sluice.deb"
# Unit enabling and the sluice postinst work offline in a chroot; policy-rc.d
# keeps invoke-rc.d from starting anything.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# The path filters kept every other package's man pages out, and with them
# the man1 directory the sluice pages unpack into (dpkg filters
# directories too): make it.
mkdir -p "$root/usr/share/man/man1"
chroot "$root" dpkg -i /tmp/sluice.deb >/dev/null 2>&1 || { chroot "$root" dpkg -i /tmp/sluice.deb; exit 1; }
rm -f "$root/tmp/sluice.deb" "$root/usr/sbin/policy-rc.d"
# mmdebstrap keeps its --dpkgopt path filters in the chroot
# (/etc/dpkg/dpkg.cfg.d/99mmdebstrap): the package's man pages get in by
# the path-include above; its completions are outside every filter.
for f in usr/share/man/man1/sluice.1.gz usr/share/man/man1/sluice-explain.1.gz \
         usr/share/bash-completion/completions/sluice; do
  [ -s "$root/$f" ] || { echo "build.sh: the sluice package's /$f is not installed in the image" >&2; exit 1; }
done
step "installed $(chroot "$root" dpkg-query -W -f='${Package} ${Version}' sluice)"

cp -r "$here/overlay/." "$root/"
echo sluice >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tsluice\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# A fresh machine-id on first boot; SSH host keys made on first boot
# (sshd.service drop-in), never shipped in the image.
: >"$root/etc/machine-id"
rm -f "$root"/etc/ssh/ssh_host_*
ln -sf /run/systemd/resolve/stub-resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
[ -e "$root/lib/systemd/systemd-resolved" ] || rm -f "$root/etc/resolv.conf"
chroot "$root" systemctl enable --quiet 2>/dev/null systemd-networkd.service dpdk.service \
  sluice.service sluice-config-import.service sluice-console-status.service \
  ssh.service serial-getty@ttyS0.service
chroot "$root" systemctl mask --quiet systemd-networkd-wait-online.service

kver=$(ls "$root/lib/modules" | sort -V | tail -1)
cmdline="root=LABEL=sluice-root ro console=tty0 console=ttyS0,115200n8"
cmdline+=" default_hugepagesz=2M hugepagesz=2M hugepages=512 intel_iommu=on iommu=pt"
[ -z "$cmdline_extra" ] || cmdline+=" $cmdline_extra"
step "configured (kernel $kver)"

# --- (3) partitions and the GPT ----------------------------------------------
esp=$work/esp.img cfg=$work/cfg.img
esp_mib=128 cfg_mib=16
mkfs.vfat -n ESP -F 32 -C "$esp" $((esp_mib * 1024)) >/dev/null
export MTOOLS_SKIP_CHECK=1
mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/loader ::/loader/entries ::/sluice
mcopy -i "$esp" "$root/usr/lib/systemd/boot/efi/systemd-bootx64.efi" ::/EFI/BOOT/BOOTX64.EFI
mcopy -i "$esp" "$root/boot/vmlinuz-$kver" ::/sluice/vmlinuz
mcopy -i "$esp" "$root/boot/initrd.img-$kver" ::/sluice/initrd.img
printf 'default sluice.conf\ntimeout 0\nconsole-mode keep\n' >"$work/loader.conf"
printf 'title sluice appliance (%s)\nlinux /sluice/vmlinuz\ninitrd /sluice/initrd.img\noptions %s\n' \
  "$kver" "$cmdline" >"$work/sluice.conf"
mcopy -i "$esp" "$work/loader.conf" ::/loader/loader.conf
mcopy -i "$esp" "$work/sluice.conf" ::/loader/entries/sluice.conf

mkfs.vfat -n SLUICECFG -C "$cfg" $((cfg_mib * 1024)) >/dev/null
mcopy -i "$cfg" "$here/SLUICECFG-README.txt" ::/README.txt
[ -z "$config" ] || mcopy -i "$cfg" "$config" ::/sluice.toml
for f in "${cfg_files[@]}"; do mcopy -i "$cfg" "$f" "::/$(basename "$f")"; done

used_mib=$(du -sm "$root" | cut -f1)
root_mib=$((used_mib * 13 / 10 + 256))

# GPT: 1 MiB alignment; the backup header needs the last 33 sectors. The
# root filesystem is made in place (mke2fs -E offset), the vfat ones copied.
total_mib=$((1 + esp_mib + cfg_mib + root_mib + 1))
rm -f "$out"
truncate -s "${total_mib}M" "$out"
sfdisk --quiet "$out" <<EOF
label: gpt
start=1MiB, size=${esp_mib}MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="ESP"
size=${cfg_mib}MiB, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7, name="SLUICECFG"
size=${root_mib}MiB, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name="sluice-root"
EOF
dd if="$esp" of="$out" bs=1M seek=1 conv=notrunc,sparse status=none
dd if="$cfg" of="$out" bs=1M seek=$((1 + esp_mib)) conv=notrunc,sparse status=none
mkfs.ext4 -q -L sluice-root -E root_owner=0:0,offset=$(((1 + esp_mib + cfg_mib) * 1048576)) \
  -d "$root" "$out" "${root_mib}M"
rm -rf "$work"
step "image $out ($(du -h --apparent-size "$out" | cut -f1), $(du -h "$out" | cut -f1) allocated): kernel command line: $cmdline"
