#!/usr/bin/env bash
# Boots the sluice appliance image in QEMU and checks that it comes up:
# UEFI (OVMF) + systemd-boot, q35 with an emulated Intel IOMMU, hugepages
# from the kernel command line, sluice started by systemd from the
# configuration seeded into the SLUICECFG partition.
#
# The VM has two NICs: management (virtio, QEMU user networking: SSH and
# the admin endpoint forwarded to host ports) and data (virtio 1.0 behind
# the IOMMU: disable-legacy=on,iommu_platform=on, PCI 0000:00:05.0, on a
# multi-queue host TAP, with two queue pairs and VIRTIO_NET_F_RSS: rss=on,
# which QEMU computes itself where it cannot load its eBPF program). sluice
# runs two workers, one queue pair each, with RSS on 5-tuples. The image's dpdk.service binds the data NIC to vfio-pci
# (dpdk-interfaces on SLUICECFG) and sluice drives it with net_virtio on
# hugepages, as a trunk port on VLAN 100.
#
# Asserts, from the serial console log and through the management NIC:
#   - systemd reached multi-user.target and sluice.service is active: the
#     image's sluice-console-status.service, ordered after multi-user.target,
#     prints both states on the console (sluice.service is Type=notify:
#     active means ports up and first snapshot published)
#   - the kernel reserved the 2 MiB hugepages and enabled the IOMMU; the
#     data NIC is bound to vfio-pci, probed by net_virtio, its link up
#   - GET /metrics answers through QEMU user networking (hostfwd)
# then scripts/image/boot_traffic.py joins the data NIC's TAP to a bridge
# of host namespaces (client, two HTTP backends, all on VLAN 100) and
# checks traffic through the VM, reloads and a kill -9 restart.
#
# Usage: scripts/image/boot-test.sh [--image FILE] [--deb PATH] [--timeout S]
#   Without --image it builds target/image/sluice-boot-test.img with
#   scripts/image/build.sh --config boot-test/sluice.toml (rootfs cached);
#   an --image must hold the same configuration and accept the key in
#   $SLUICE_BOOT_SSH_KEY (default: a key made for this run).
# KVM is used when /dev/kvm works, TCG otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=scripts/image

image=""
deb_args=()
timeout=600
while (($#)); do
  case "$1" in
    --image) image=$2; shift 2 ;;
    --deb) deb_args=(--deb "$2"); shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    *) echo "boot-test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

for tool in qemu-system-x86_64 qemu-img curl ssh ssh-keygen python3; do
  command -v "$tool" >/dev/null || { echo "boot-test.sh: $tool missing: run scripts/setup.sh --image" >&2; exit 1; }
done
ovmf_code=/usr/share/OVMF/OVMF_CODE_4M.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS_4M.fd
[ -f "$ovmf_code" ] || { echo "boot-test.sh: $ovmf_code missing: run scripts/setup.sh --image (ovmf)" >&2; exit 1; }

run=$(mktemp -d /tmp/sluice-boot-test.XXXXXX)
qemu_pid=""
tap=""
cleanup() {
  [ -z "$tap" ] || ip link del "$tap" 2>/dev/null || true
  [ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null || true
  [ -z "$qemu_pid" ] || wait "$qemu_pid" 2>/dev/null || true
  if [ "${keep:-0}" = 1 ]; then echo "boot-test: logs kept in $run"; else rm -rf "$run"; fi
}
trap cleanup EXIT

# Root's SSH key for this run: SLUICECFG's authorized_keys.
ssh_key=${SLUICE_BOOT_SSH_KEY:-$run/id_ed25519}
[ -f "$ssh_key" ] || ssh-keygen -q -t ed25519 -N '' -C sluice-boot-test -f "$ssh_key"
if [ -z "$image" ]; then
  image=target/image/sluice-boot-test.img
  printf 'pci\t0000:00:05.0\tvfio-pci\n' >"$run/dpdk-interfaces"
  cp "$ssh_key.pub" "$run/authorized_keys"
  t_build=$(date +%s)
  # no_timer_check: under TCG on a loaded host the kernel's early check of
  # the timer through the remapped IO-APIC can miss its window and panic
  # ("timer doesn't work through Interrupt-remapped IO-APIC").
  "$here/build.sh" "${deb_args[@]}" --config "$here/boot-test/sluice.toml" \
    --cfg-file "$run/dpdk-interfaces" --cfg-file "$run/authorized_keys" \
    --cmdline-extra no_timer_check --out "$image"
  echo "boot-test: image built in $(($(date +%s) - t_build)) s"
fi
# The guest writes to a qcow2 overlay: the built image stays as built.
qemu-img create -q -f qcow2 -b "$(realpath "$image")" -F raw "$run/disk.qcow2"

# KVM when /dev/kvm is there, TCG otherwise; a KVM run that dies or stops
# on a KVM internal error before the firmware prints anything (nested hosts
# often expose /dev/kvm and abort on the first MSR write, or fail to
# emulate a firmware instruction) is retried once under TCG. SLUICE_BOOT_ACCEL=tcg|kvm
# forces one.
accel=${SLUICE_BOOT_ACCEL:-auto}
fallback=0
if [ "$accel" = auto ]; then
  accel=tcg
  if [ -w /dev/kvm ]; then accel=kvm fallback=1; fi
fi

# Free host ports for the guest's admin endpoint (sluice listens on 9064)
# and SSH.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
ssh_port=$(free_port)
serial=$run/serial.log
: >"$serial"
# The data NIC's TAP: made here, opened by QEMU, then moved into the
# traffic test's bridge namespace (the open queue moves with it).
tap=slbt$$
ip tuntap add dev "$tap" mode tap multi_queue
ip link set "$tap" up
# Two queue pairs: 2 × 2 + 2 MSI-X vectors (config and control queue).
data_args=(-netdev tap,id=data,ifname="$tap",script=no,downscript=no,queues=2
  -device virtio-net-pci,netdev=data,bus=pcie.0,addr=0x5,disable-legacy=on,iommu_platform=on,mq=on,vectors=6,rss=on)
start_qemu() {
  local machine=q35 cpu=max
  # intremap with an in-kernel irqchip needs it split.
  [ "$accel" = tcg ] || { machine=q35,kernel-irqchip=split; cpu=host; }
  cp "$ovmf_vars" "$run/vars.fd"
  : >"$serial"
  echo "boot-test: booting $image (accel $accel), serial log $serial, /metrics on 127.0.0.1:$port"
  t_boot=$(date +%s)
  qemu-system-x86_64 -accel "$accel" -machine "$machine" -cpu "$cpu" -smp 2 -m 2048 \
    -nodefaults -display none -no-reboot \
    -device intel-iommu,intremap=on \
    -drive if=pflash,format=raw,unit=0,readonly=on,file="$ovmf_code" \
    -drive if=pflash,format=raw,unit=1,file="$run/vars.fd" \
    -drive if=virtio,format=qcow2,file="$run/disk.qcow2" \
    -netdev user,id=mgmt,hostfwd=tcp:127.0.0.1:"$port"-:9064,hostfwd=tcp:127.0.0.1:"$ssh_port"-:22 \
    -device virtio-net-pci,netdev=mgmt "${data_args[@]}" \
    -serial file:"$serial" \
    >"$run/qemu.log" 2>&1 &
  qemu_pid=$!
}
start_qemu

fail() {
  echo "boot-test: FAIL: $*" >&2
  echo "--- last 60 lines of the serial console ---" >&2
  tail -n 60 "$serial" >&2 || true
  keep=1
  exit 1
}

status=""
deadline=$((t_boot + timeout))
while :; do
  # A KVM internal error (an emulation failure in the firmware, on some
  # nested hosts) does not end QEMU: it stops the guest and waits. Ended
  # here, it takes the TCG retry below like an abort does.
  if ((fallback)) && [ ! -s "$serial" ] && grep -a -q 'KVM internal error' "$run/qemu.log"; then
    kill "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  if ! kill -0 "$qemu_pid" 2>/dev/null; then
    wait "$qemu_pid" 2>/dev/null || true
    if ((fallback)) && [ ! -s "$serial" ]; then
      echo "boot-test: KVM run failed ($(grep -a -m1 -i error "$run/qemu.log" || true)): retrying under TCG"
      accel=tcg fallback=0
      start_qemu
      deadline=$((t_boot + timeout))
      continue
    fi
    qemu_pid=""
    fail "QEMU exited: $(cat "$run/qemu.log")"
  fi
  if grep -a -q 'Kernel panic - not syncing' "$serial"; then
    fail "the guest kernel panicked: $(grep -a -o 'Kernel panic - not syncing.*' "$serial" | head -1)"
  fi
  # console-status ends its report with "sluice-status: done".
  status=$(grep -a -o 'sluice-status: sluice.service [a-z-]*; multi-user.target [a-z-]*' "$serial" | tail -1 || true)
  [ -z "$status" ] || ! grep -a -q 'sluice-status: done' "$serial" || break
  (($(date +%s) < deadline)) || fail "no sluice-status line within ${timeout}s"
  sleep 2
done
t_status=$(($(date +%s) - t_boot))
echo "boot-test: $status (${t_status}s after QEMU start)"
checks=0
# sluice-console-status runs after multi-user.target is reached.
[[ "$status" == *"multi-user.target active" ]] || fail "systemd did not reach multi-user.target: $status"
checks=$((checks + 1))
[[ "$status" == "sluice-status: sluice.service active;"* ]] || fail "sluice.service is not active: $status"
checks=$((checks + 1))
grep -a -q 'Command line:.*hugepages=512.*intel_iommu=on' "$serial" || fail "kernel command line lacks hugepages/IOMMU"
checks=$((checks + 1))
grep -a -q -i 'DMAR: IOMMU enabled\|DMAR.*Intel(R) Virtualization Technology for Directed I/O' "$serial" \
  || fail "the kernel did not enable the Intel IOMMU"
checks=$((checks + 1))
grep -a -q 'sluice-config-import: .*sluice.toml -> /etc/sluice/sluice.toml' "$serial" \
  || fail "the SLUICECFG partition's sluice.toml was not imported"
checks=$((checks + 1))

grep -a -q 'sluice-status: pci 0000:00:05.0 driver vfio-pci' "$serial" \
  || fail "dpdk.service did not bind the data NIC 0000:00:05.0 to vfio-pci"
checks=$((checks + 1))
grep -a -q 'EAL: Probe PCI driver: net_virtio .* device: 0000:00:05.0' "$serial" \
  || fail "EAL did not probe 0000:00:05.0 with net_virtio"
checks=$((checks + 1))
grep -a -q 'port(s): data0=0000:00:05.0(dpdk 0, link up' "$serial" \
  || fail "sluice's data port is not 0000:00:05.0 with its link up"
checks=$((checks + 1))
# virtio reports no speed (RTE_ETH_SPEED_NUM_UNKNOWN): not a number of Mb/s.
grep -a -q 'data0=0000:00:05.0(dpdk 0, link up speed unknown)' "$serial" \
  || fail "sluice printed a number for virtio's unknown link speed"
checks=$((checks + 1))
echo "boot-test: $(grep -a -o 'port(s): data0=[^)]*)' "$serial" | tail -1) (vfio-pci, net_virtio)"

metrics=""
for _ in $(seq 30); do
  metrics=$(curl -sf --max-time 5 "http://127.0.0.1:$port/metrics" || true)
  [ -z "$metrics" ] || break
  sleep 2
done
[ -n "$metrics" ] || fail "GET /metrics through hostfwd 127.0.0.1:$port did not answer"
grep -q '^sluice_' <<<"$metrics" || fail "/metrics answered without sluice_ metrics"
checks=$((checks + 1))
echo "boot-test: /metrics answered ($(grep -c '^sluice_' <<<"$metrics") sluice_ samples)"

echo "boot-test: multi-user and sluice active ${t_status}s after QEMU start (accel $accel); boot checks done $(($(date +%s) - t_boot))s after it"

# The TAP now belongs to the traffic test's namespace (deleted with it).
moved_tap=$tap tap=""
if ! python3 "$here/boot_traffic.py" --tap "$moved_tap" --ssh-port "$ssh_port" --ssh-key "$ssh_key" \
    --metrics-port "$port" | tee "$run/traffic.log"; then
  fail "traffic through the VM (above)"
fi
traffic=$(awk '/^boot-traffic: [0-9]+ passed/ {print $2}' "$run/traffic.log")
checks=$((checks + ${traffic:-0}))
echo "boot-test: all checks done $(($(date +%s) - t_boot))s after QEMU start"
echo "boot-test: $checks passed, 0 failed"
