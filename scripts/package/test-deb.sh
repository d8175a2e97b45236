#!/usr/bin/env bash
# Checks the Debian package through what dpkg sees: files, conffiles,
# md5sums, the stripped binary and its -dbgsym package, control fields,
# Depends against the binary's NEEDED libraries, lintian, the shipped
# configuration through the packaged binary (check-config), the unit
# through systemd-analyze verify and security, and the maintainer scripts
# by installing, upgrading and purging the package in a scratch root.
#
# Usage: scripts/package/test-deb.sh [--profile dev|release] [--no-build]
# scripts/test.sh runs it with --profile dev --no-build on the debug
# binary it already built (the release build's fat LTO takes minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."

out=target/debian-test
rm -rf "$out"
scripts/package/build-deb.sh --out "$out" "$@"
deb=$(ls "$out"/sluice_*.deb)
dbgdeb=$(ls "$out"/sluice-dbgsym_*.deb)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "test-deb: FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "test-deb: ok: $*"; }

# Files.
contents=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/bin/sluice ./etc/sluice/sluice.toml ./etc/default/sluice ./lib/systemd/system/sluice.service \
         ./usr/share/doc/sluice/copyright ./usr/share/doc/sluice/changelog.Debian.gz \
         ./usr/share/doc/sluice/README.md ./usr/share/doc/sluice/deployment.md.gz \
         ./usr/share/doc/sluice/operations.md.gz ./usr/share/doc/sluice/configuration.md.gz \
         ./usr/share/doc/sluice/architecture.md.gz ./usr/share/doc/sluice/scale-out.md.gz \
         ./usr/share/lintian/overrides/sluice; do
  grep -qxF "$f" <<<"$contents" && ok "ships $f" || fail "$f not in the package"
done
for f in ./usr/share/man/man1/sluice.1.gz ./usr/share/bash-completion/completions/sluice \
         ./usr/share/zsh/vendor-completions/_sluice ./usr/share/fish/vendor_completions.d/sluice.fish; do
  grep -qxF "$f" <<<"$contents" && ok "ships $f" || fail "$f not in the package"
done
# What the docs point to (operations.md "Alerts and dashboard"), as in the
# source tree.
for f in contrib/prometheus/sluice.rules.yml contrib/prometheus/sluice.rules.test.yml \
         contrib/grafana/sluice.json; do
  if grep -qxF "./usr/share/doc/sluice/$f" <<<"$contents"; then
    ok "ships /usr/share/doc/sluice/$f"
  else
    fail "/usr/share/doc/sluice/$f not in the package"
  fi
done
# Every doc the shipped docs link to by name is shipped, but for the
# performance pages: measurements of this repository's harnesses on its
# development machine (performance.md) and their history
# (performance-log.md), read in the source tree, not on an appliance.
for d in docs/*.md; do
  name=$(basename "$d" .md)
  case "$name" in performance|performance-log) continue ;; esac
  grep -qxF "./usr/share/doc/sluice/$name.md.gz" <<<"$contents" && ok "ships $name.md.gz" \
    || fail "docs/$name.md is not shipped as /usr/share/doc/sluice/$name.md.gz"
done
mode=$(dpkg-deb -c "$deb" | awk '$NF == "./usr/bin/sluice" {print $1 " " $2}')
[ "$mode" = "-rwxr-xr-x root/root" ] && ok "/usr/bin/sluice $mode" || fail "/usr/bin/sluice is '$mode'"

# Control fields.
[ "$(dpkg-deb -f "$deb" Package)" = sluice ] && ok "Package: sluice" || fail "Package field"
[ "$(dpkg-deb -f "$deb" Architecture)" = "$(dpkg --print-architecture)" ] \
  && ok "Architecture" || fail "Architecture field"
dpkg-deb -f "$deb" Version | grep -qE '^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+$' && ok "Version" || fail "Version field"
dpkg-deb -e "$deb" "$work/DEBIAN"
[ "$(cat "$work/DEBIAN/conffiles")" = "$(printf '%s\n' /etc/default/sluice /etc/sluice/sluice.toml)" ] \
  && ok "conffiles /etc/default/sluice /etc/sluice/sluice.toml" || fail "conffiles: $(cat "$work/DEBIAN/conffiles")"

# Depends: one package per NEEDED library of the packaged binary, found
# independently of the build script (ldconfig's path, then dpkg -S).
dpkg-deb -x "$deb" "$work/root"

# md5sums: every file but the conffiles, each hash right.
if [ -f "$work/DEBIAN/md5sums" ]; then
  listed=$(awk '{print $2}' "$work/DEBIAN/md5sums" | sort)
  files=$(cd "$work/root" && find . -type f -printf '%P\n' | grep -vxE 'etc/(sluice/sluice\.toml|default/sluice)' | sort)
  [ "$listed" = "$files" ] && ok "md5sums lists every file but the conffiles" \
    || fail "md5sums: $(diff <(echo "$listed") <(echo "$files") | head -5)"
  (cd "$work/root" && md5sum --quiet -c "$work/DEBIAN/md5sums") && ok "md5sums match" || fail "md5sums do not match"
else
  fail "no DEBIAN/md5sums"
fi

# The binary is stripped; its debug sections are in sluice-dbgsym, found
# by build id.
sections=$(readelf -S -W "$work/root/usr/bin/sluice")
if grep -qE '\.(symtab|debug_[a-z]+) ' <<<"$sections"; then
  fail "/usr/bin/sluice is not stripped: $(grep -oE '\.(symtab|debug_[a-z]+) ' <<<"$sections" | tr '\n' ' ')"
else
  ok "/usr/bin/sluice is stripped"
fi
build_id=$(readelf -n "$work/root/usr/bin/sluice" | sed -n 's/^ *Build ID: *\([0-9a-f]*\)$/\1/p')
[ -n "$build_id" ] && ok "build id $build_id" || fail "/usr/bin/sluice has no build id"
dpkg-deb -x "$dbgdeb" "$work/dbg"
debug_file=$work/dbg/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
if [ -n "$build_id" ] && [ -f "$debug_file" ] && grep -q '\.debug_line ' <<<"$(readelf -S -W "$debug_file")"; then
  ok "sluice-dbgsym has the debug sections under /usr/lib/debug/.build-id"
else
  fail "sluice-dbgsym lacks $debug_file with .debug_line"
fi
[ "$(dpkg-deb -f "$dbgdeb" Depends)" = "sluice (= $(dpkg-deb -f "$deb" Version))" ] \
  && ok "sluice-dbgsym depends on its sluice" || fail "sluice-dbgsym Depends: $(dpkg-deb -f "$dbgdeb" Depends)"
[ "$(dpkg-deb -f "$dbgdeb" Build-Ids)" = "$build_id" ] && ok "sluice-dbgsym Build-Ids" \
  || fail "sluice-dbgsym Build-Ids: $(dpkg-deb -f "$dbgdeb" Build-Ids)"

depends=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/^ *//; s/ .*//')
needed=$(readelf -d "$work/root/usr/bin/sluice" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "no NEEDED entries"
rte=0
for lib in $needed; do
  path=$( (ldconfig -p || true) | awk -v l="$lib" '$1 == l && !p {p = $NF} END {print p}')
  pkg=$( (dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path" 2>/dev/null || true) \
    | head -1 | cut -d: -f1)
  case "$lib" in librte_*) rte=$((rte + 1)) ;; esac
  grep -qxF "$pkg" <<<"$depends" && ok "NEEDED $lib -> Depends $pkg" || fail "NEEDED $lib ($pkg) not in Depends"
done
((rte >= 3)) && ok "$rte librte libraries linked" || fail "only $rte librte libraries in NEEDED"
# sluice talks to the kernel over rtnetlink; iproute2 is for the operator.
grep -qxF iproute2 <<<"$depends" && fail "Depends iproute2, which sluice does not run" || ok "no Depends on iproute2"
dpkg-deb -f "$deb" Recommends | grep -qE '(^|, )iproute2(,|$)' && ok "Recommends iproute2" || fail "Recommends lacks iproute2"
for p in mempool-ring net-tap bus-vdev bus-pci; do
  grep -qE "^librte-$p[0-9-]+$" <<<"$depends" && ok "Depends has the $p plugin" || fail "Depends lacks librte-$p"
done
# dpdk (dpdk.service: hugepages and the NIC binding the unit starts
# after) is needed by every install, --no-install-recommends included;
# the NIC's own PMD is the operator's choice (deployment.md).
grep -qxF dpdk <<<"$depends" && ok "Depends dpdk" || fail "Depends lacks dpdk"
grep -qxF adduser <<<"$depends" && ok "Depends adduser (postinst's addgroup)" || fail "Depends lacks adduser"
for p in net-virtio net-af-packet; do
  dpkg-deb -f "$deb" Recommends | grep -qE "(^|, )librte-$p[0-9-]+ " && ok "Recommends librte-$p" \
    || fail "Recommends lacks librte-$p"
done

# APT can resolve every dependency on this Debian (a simulated install).
for recommends in --install-recommends --no-install-recommends; do
  if sim=$(apt-get install -s -q "$recommends" "$PWD/$deb" 2>&1) && grep -q '^Inst sluice ' <<<"$sim"; then
    ok "apt-get install -s $recommends resolves the dependencies"
  else
    fail "apt-get install -s $recommends: $sim"
  fi
done

# lintian: no error; the warnings and notes it may give are overridden in
# /usr/share/lintian/overrides/sluice, each with its reason, so any
# warning is new and fails too.
if command -v lintian >/dev/null; then
  lintian --info --display-info --no-tag-display-limit "$deb" "$dbgdeb" >"$work/lintian.txt" 2>&1 || true
  cat "$work/lintian.txt"
  errors=$(grep -c '^E: ' "$work/lintian.txt" || true)
  warnings=$(grep -c '^W: ' "$work/lintian.txt" || true)
  ((errors == 0)) && ok "lintian: no error" || fail "lintian: $errors error(s)"
  ((warnings == 0)) && ok "lintian: no warning" || fail "lintian: $warnings warning(s)"
else
  fail "lintian missing: run scripts/setup.sh"
fi

# Man pages and completions: one page per subcommand the packaged binary
# lists, sluice(1) naming each, every completion script offering each.
subcommands=$("$work/root/usr/bin/sluice" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && NF {print $1}' | grep -vx help)
[ -n "$subcommands" ] || fail "sluice --help lists no subcommands"
man1=$work/root/usr/share/man/man1
top=$(zcat "$man1/sluice.1.gz")
for sub in $subcommands; do
  [ -f "$man1/sluice-$sub.1.gz" ] && ok "man page sluice-$sub(1)" || fail "no sluice-$sub.1.gz"
  grep -qF "sluice\\-${sub//-/\\-}(1)" <<<"$top" && ok "sluice(1) names sluice-$sub(1)" \
    || fail "sluice(1) does not name sluice-$sub(1)"
  zcat "$man1/sluice-$sub.1.gz" | grep -q "^\.TH sluice-$sub 1 " && ok "sluice-$sub(1) has its title" \
    || fail "sluice-$sub.1.gz has no .TH line"
  for c in usr/share/bash-completion/completions/sluice usr/share/zsh/vendor-completions/_sluice \
           usr/share/fish/vendor_completions.d/sluice.fish; do
    grep -qw -- "$sub" "$work/root/$c" || fail "/$c does not offer $sub"
  done
done
pages=$(ls "$man1" | wc -l)
[ "$pages" -eq $(($(wc -w <<<"$subcommands") + 1)) ] && ok "$pages man pages" || fail "$pages man pages for: $subcommands"
for section in '"EXIT STATUS"' ENVIRONMENT SIGNALS FILES '"SEE ALSO"'; do
  grep -qx "\.SH $section" <<<"$top" && ok "sluice(1) has $section" || fail "sluice(1) lacks $section"
done
toml5=$work/root/usr/share/man/man5/sluice.toml.5.gz
# Read whole, then searched: `zcat | grep -q` fails under pipefail when
# grep stops reading early.
page5=$( [ -f "$toml5" ] && zcat "$toml5" || true)
if grep -q '^\.TH SLUICE.TOML 5 ' <<<"$page5" && grep -qF 'conntrack_capacity' <<<"$page5" \
   && grep -qF 'flow_hash_key_file' <<<"$page5"; then
  ok "sluice.toml(5): the configuration reference"
else
  fail "no sluice.toml.5.gz with the configuration reference"
fi
modes=$(dpkg-deb -c "$deb" | awk '$NF ~ /(man1\/|completions)/ && $1 !~ /^d/ {print $1}' | sort -u)
[ "$modes" = "-rw-r--r--" ] && ok "man pages and completions are 0644" || fail "modes: $modes"
if command -v man >/dev/null; then
  # man renders each page (groff's warnings go to stderr: any fails).
  for page in "$man1"/*.1.gz; do
    name=$(basename "$page" .1.gz)
    warnings=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null || echo "man failed")
    text=$(MANWIDTH=80 man -l "$page" 2>/dev/null | col -b)
    if [ -z "$warnings" ] && grep -q "^NAME" <<<"$text" && grep -qF "$name" <<<"$text"; then
      ok "man -l renders $name(1)"
    else
      fail "man -l $name: ${warnings:-no NAME section}"
    fi
  done
else
  echo "test-deb: skipped: man -l (man not installed)"
fi
bash -n "$work/root/usr/share/bash-completion/completions/sluice" && ok "bash completion parses" \
  || fail "bash completion does not parse"
if out=$(bash -c 'source "$1" && complete -p sluice' _ "$work/root/usr/share/bash-completion/completions/sluice" 2>&1) \
   && grep -q -- '-F _sluice' <<<"$out"; then
  ok "bash completion registers for sluice"
else
  fail "bash completion: $out"
fi
for sh in zsh fish; do
  c=$work/root/usr/share/zsh/vendor-completions/_sluice
  [ "$sh" = fish ] && c=$work/root/usr/share/fish/vendor_completions.d/sluice.fish
  if command -v "$sh" >/dev/null; then
    "$sh" -n "$c" && ok "$sh completion parses" || fail "$sh completion does not parse"
  else
    echo "test-deb: skipped: $sh -n (no $sh here)"
  fi
done

# The shipped configuration passes the packaged binary's check.
if "$work/root/usr/bin/sluice" check-config "$work/root/etc/sluice/sluice.toml"; then
  ok "check-config on the shipped sluice.toml"
else
  fail "the shipped sluice.toml fails check-config"
fi
# Its comments point at files that exist in the package.
grep -q '/usr/share/doc/sluice/deployment.md.gz' "$work/root/etc/sluice/sluice.toml" \
  && ok "sluice.toml points at deployment.md.gz" || fail "sluice.toml lacks its doc pointer"

# The unit: systemd-analyze verify prints nothing for a good unit (its exit
# status stays 0 on unknown keys and bad values, so any output fails).
unit=$work/root/lib/systemd/system/sluice.service
for k in 'Type=notify' 'WatchdogSec=' 'ExecReload=/usr/bin/sluice reload' 'Restart=on-failure' \
         'RestartPreventExitStatus=2' 'LimitMEMLOCK=infinity' '--file-prefix sluice' \
         'EnvironmentFile=-/etc/default/sluice' '--control-socket-group-if-exists sluice' \
         'SystemCallFilter=@system-service'; do
  grep -qF -- "$k" "$unit" && ok "unit has $k" || fail "unit lacks $k"
done
# Its Documentation= man pages are in the package.
for page in $(sed -n 's/^Documentation=//p' "$unit" | tr ' ' '\n' | sed -n 's/^man:\(.*\)(\([0-9]\))$/\1.\2/p'); do
  [ -f "$work/root/usr/share/man/man${page##*.}/$page.gz" ] && ok "unit's Documentation man:$page" \
    || fail "unit's Documentation names $page, which the package does not ship"
done
# EXTEND_TIMEOUT_USEC covers bgp.drain_time: TimeoutStopSec is the stop
# after it, which the binary assumes (service_manager::STOP_AFTER_DRAIN).
grep -qx 'TimeoutStopSec=30s' "$unit" && ok "TimeoutStopSec=30s" || fail "TimeoutStopSec is not 30s"
# The conntrack hand-off file is in /run/sluice, a RuntimeDirectory that a
# restart keeps; ExecStart names it, as RUNTIME_DIRECTORY (where sluice
# would look by default) is unset for EAL.
grep -qx 'RuntimeDirectoryPreserve=restart' "$unit" && ok "RuntimeDirectoryPreserve=restart" \
  || fail "unit lacks RuntimeDirectoryPreserve=restart"
handoff=$(sed -n 's/^ExecStart=.* --handoff-file \([^ ]*\).*$/\1/p' "$unit")
if [ "$handoff" = /run/sluice/conntrack.handoff ] \
   && sed -n 's/^RuntimeDirectory=//p' "$unit" | tr ' ' '\n' | grep -qx sluice; then
  ok "ExecStart's --handoff-file $handoff is in RuntimeDirectory=sluice"
else
  fail "ExecStart's --handoff-file is '$handoff', not /run/sluice/conntrack.handoff in RuntimeDirectory=sluice"
fi
grep -qE '^ExecStart=.* --no-handoff( |$)' "$unit" && fail "ExecStart has --no-handoff" || ok "ExecStart keeps the hand-off on"
if command -v systemd-analyze >/dev/null; then
  mkdir -p "$work/verify"
  # ExecStart must name an existing binary: the packaged one.
  sed "s|/usr/bin/sluice|$work/root/usr/bin/sluice|g" "$unit" >"$work/verify/sluice.service"
  # Its Documentation= man pages are looked up in the package's.
  report=$(MANPATH=$work/root/usr/share/man systemd-analyze verify "$work/verify/sluice.service" 2>&1) || true
  [ -z "$report" ] && ok "systemd-analyze verify sluice.service" || fail "systemd-analyze verify: $report"
  # The sandbox's exposure score (0 safest, 10 unprotected): 2.7 as
  # shipped; what keeps it from lower is explained in the unit.
  if score=$(cd "$work/verify" && systemd-analyze security --offline=true --threshold=30 --no-pager \
               sluice.service 2>&1); then
    ok "systemd-analyze security: $(grep -o 'exposure level.*' <<<"$score")"
  else
    fail "systemd-analyze security above 3.0: $(grep -e '✗' -e 'Overall' <<<"$score")"
  fi
else
  echo "test-deb: skipped: systemd-analyze verify (systemd-analyze not installed)"
fi
# Maintainer scripts parse.
for s in postinst prerm postrm; do
  sh -n "$work/DEBIAN/$s" && ok "$s parses" || fail "$s does not parse"
done

# An upgrade restarts a running service (postinst: try-restart, which
# keeps /run/sluice and the hand-off file in it) and never stops it first
# (prerm stops on remove only; a stop would remove them). The scripts run
# with systemctl, deb-systemd-invoke, deb-systemd-helper and getent
# stubbed (each logs its arguments), in a mount namespace of their own
# where /run/systemd/system exists, as on a host booted with systemd.
mkdir -p "$work/stubs"
for tool in systemctl deb-systemd-invoke deb-systemd-helper getent; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$tool" "$work/stubs.log" >"$work/stubs/$tool"
  chmod 0755 "$work/stubs/$tool"
done
maintscript() {
  : >"$work/stubs.log"
  unshare --mount sh -c 'mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec "$@"' \
    _ env PATH="$work/stubs:$PATH" sh "$work/DEBIAN/$1" "${@:2}" >/dev/null 2>&1
}
if maintscript prerm remove && grep -qx 'deb-systemd-invoke stop sluice.service' "$work/stubs.log"; then
  maintscript prerm upgrade 0.0.1-1 \
    && ! grep -q 'deb-systemd-invoke' "$work/stubs.log" && ok "prerm upgrade does not stop sluice.service" \
    || fail "prerm upgrade: $(tr '\n' ';' <"$work/stubs.log")"
  maintscript postinst configure 0.0.1-1 \
    && [ "$(grep 'deb-systemd-invoke' "$work/stubs.log")" = 'deb-systemd-invoke try-restart sluice.service' ] \
    && ok "postinst configure (upgrade) runs try-restart sluice.service, no stop" \
    || fail "postinst configure 0.0.1-1: $(tr '\n' ';' <"$work/stubs.log")"
  maintscript postinst configure \
    && ! grep -q 'deb-systemd-invoke' "$work/stubs.log" && ok "postinst configure (first install) starts nothing" \
    || fail "postinst configure: $(tr '\n' ';' <"$work/stubs.log")"
else
  echo "test-deb: skipped: maintainer scripts under stubs (no mount namespace here: $(tr '\n' ';' <"$work/stubs.log"))"
fi

# The maintainer scripts for real: dpkg installs the package into a
# scratch root, running them outside a chroot with DPKG_ROOT set (the
# scripts and deb-systemd-helper then act on that root, not this host).
# A first install neither enables the service nor starts it; the group
# sluice is made; an enabled service stays enabled across an upgrade;
# purge removes the symlinks and deb-systemd-helper's state.
scratch=$work/scratch
mkdir -p "$scratch/var/lib/dpkg/info" "$scratch/var/lib/dpkg/updates" "$scratch/etc"
touch "$scratch/var/lib/dpkg/status"
grep -E '^(root|nogroup):' /etc/group >"$scratch/etc/group"
grep -E '^(root|nogroup):' /etc/gshadow >"$scratch/etc/gshadow" 2>/dev/null || true
in_scratch() {
  dpkg --root="$scratch" --force-script-chrootless --force-depends --force-not-root "$@" >"$work/dpkg.log" 2>&1 \
    || { cat "$work/dpkg.log" >&2; return 1; }
}
wants=$scratch/etc/systemd/system/multi-user.target.wants/sluice.service
if in_scratch -i "$deb"; then
  ok "dpkg -i into a scratch root"
  [ -e "$wants" ] || [ -L "$wants" ] && fail "a first install enabled sluice.service ($wants)" \
    || ok "a first install leaves sluice.service disabled"
  [ -f "$scratch/var/lib/systemd/deb-systemd-helper-enabled/sluice.service.dsh-also" ] \
    && ok "deb-systemd-helper records the unit's state" || fail "no deb-systemd-helper state for sluice.service"
  grep -q '^sluice:' "$scratch/etc/group" && ok "postinst makes the group sluice" \
    || fail "no group sluice in the scratch root's /etc/group"
  [ -f "$scratch/etc/default/sluice" ] && ok "/etc/default/sluice installed" || fail "/etc/default/sluice missing"
  # The operator enables it (systemctl enable); an upgrade keeps it so.
  systemctl --root="$scratch" --quiet enable sluice.service
  [ -L "$wants" ] || fail "systemctl enable made no $wants"
  if in_scratch -i "$deb"; then
    [ -L "$wants" ] && ok "an upgrade keeps an enabled sluice.service enabled" \
      || fail "an upgrade disabled sluice.service"
  else
    fail "upgrade in the scratch root"
  fi
  # Disabled by the operator: an upgrade keeps it disabled.
  systemctl --root="$scratch" --quiet disable sluice.service
  if in_scratch -i "$deb"; then
    [ -e "$wants" ] || [ -L "$wants" ] && fail "an upgrade enabled a disabled sluice.service" \
      || ok "an upgrade keeps a disabled sluice.service disabled"
  else
    fail "second upgrade in the scratch root"
  fi
  systemctl --root="$scratch" --quiet enable sluice.service
  if in_scratch --purge sluice; then
    [ -e "$wants" ] || [ -L "$wants" ] && fail "purge left $wants" || ok "purge removes the unit's symlinks"
    ls "$scratch/var/lib/systemd/deb-systemd-helper-enabled/" 2>/dev/null | grep -q sluice \
      && fail "purge left deb-systemd-helper state" || ok "purge removes deb-systemd-helper's state"
    [ -e "$scratch/etc/sluice/sluice.toml" ] && fail "purge left /etc/sluice/sluice.toml" \
      || ok "purge removes the conffiles"
  else
    fail "purge in the scratch root"
  fi
else
  fail "dpkg -i into a scratch root"
fi

if [ "$(systemctl is-system-running 2>/dev/null || true)" = running ]; then
  echo "test-deb: note: systemd runs here; the unit is started for real by the image boot test"
fi

if ((failures)); then
  echo "test-deb: $failures check(s) failed" >&2
  exit 1
fi
echo "test-deb: all checks passed ($deb)"
