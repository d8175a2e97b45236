#!/usr/bin/env bash
# Checks the Debian package through what dpkg sees: files, conffiles,
# control fields, Depends against the binary's NEEDED libraries, the
# shipped configuration through the packaged binary (check-config), and
# the unit through systemd-analyze verify.
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "test-deb: FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "test-deb: ok: $*"; }

# Files.
contents=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/bin/sluice ./etc/sluice/sluice.toml ./lib/systemd/system/sluice.service \
         ./usr/share/doc/sluice/copyright ./usr/share/doc/sluice/changelog.Debian.gz \
         ./usr/share/doc/sluice/README.md ./usr/share/doc/sluice/deployment.md.gz \
         ./usr/share/doc/sluice/operations.md.gz ./usr/share/doc/sluice/configuration.md.gz; do
  grep -qxF "$f" <<<"$contents" && ok "ships $f" || fail "$f not in the package"
done
for f in ./usr/share/man/man1/sluice.1.gz ./usr/share/bash-completion/completions/sluice \
         ./usr/share/zsh/vendor-completions/_sluice ./usr/share/fish/vendor_completions.d/sluice.fish; do
  grep -qxF "$f" <<<"$contents" && ok "ships $f" || fail "$f not in the package"
done
mode=$(dpkg-deb -c "$deb" | awk '$NF == "./usr/bin/sluice" {print $1 " " $2}')
[ "$mode" = "-rwxr-xr-x root/root" ] && ok "/usr/bin/sluice $mode" || fail "/usr/bin/sluice is '$mode'"

# Control fields.
[ "$(dpkg-deb -f "$deb" Package)" = sluice ] && ok "Package: sluice" || fail "Package field"
[ "$(dpkg-deb -f "$deb" Architecture)" = "$(dpkg --print-architecture)" ] \
  && ok "Architecture" || fail "Architecture field"
dpkg-deb -f "$deb" Version | grep -qE '^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+$' && ok "Version" || fail "Version field"
dpkg-deb -e "$deb" "$work/DEBIAN"
[ "$(cat "$work/DEBIAN/conffiles")" = /etc/sluice/sluice.toml ] \
  && ok "conffile /etc/sluice/sluice.toml" || fail "conffiles: $(cat "$work/DEBIAN/conffiles")"

# Depends: one package per NEEDED library of the packaged binary, found
# independently of the build script (ldconfig's path, then dpkg -S).
dpkg-deb -x "$deb" "$work/root"
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
dpkg-deb -f "$deb" Recommends | grep -qE '(^|, )dpdk(,|$)' && ok "Recommends dpdk" || fail "Recommends lacks dpdk"

# APT can resolve every dependency on this Debian (a simulated install).
if sim=$(apt-get install -s -q "$PWD/$deb" 2>&1) && grep -q '^Inst sluice ' <<<"$sim"; then
  ok "apt-get install -s resolves the dependencies"
else
  fail "apt-get install -s: $sim"
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
         'RestartPreventExitStatus=2' 'LimitMEMLOCK=infinity' '--file-prefix sluice'; do
  grep -qF -- "$k" "$unit" && ok "unit has $k" || fail "unit lacks $k"
done
if command -v systemd-analyze >/dev/null; then
  mkdir -p "$work/verify"
  # ExecStart must name an existing binary: the packaged one.
  sed "s|/usr/bin/sluice|$work/root/usr/bin/sluice|g" "$unit" >"$work/verify/sluice.service"
  report=$(systemd-analyze verify "$work/verify/sluice.service" 2>&1) || true
  [ -z "$report" ] && ok "systemd-analyze verify sluice.service" || fail "systemd-analyze verify: $report"
else
  echo "test-deb: skipped: systemd-analyze verify (systemd-analyze not installed)"
fi
# Maintainer scripts parse.
for s in postinst prerm postrm; do
  sh -n "$work/DEBIAN/$s" && ok "$s parses" || fail "$s does not parse"
done

if [ "$(systemctl is-system-running 2>/dev/null || true)" = running ]; then
  echo "test-deb: note: systemd runs here; the unit is started for real by the image boot test"
fi

if ((failures)); then
  echo "test-deb: $failures check(s) failed" >&2
  exit 1
fi
echo "test-deb: all checks passed ($deb)"
