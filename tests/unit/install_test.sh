#!/usr/bin/env bash
# `make install` into a scratch prefix: the programs, units and configuration land where the units
# say, the installed isnd.conf and isn-agg.conf pass --check-config's parser, and systemd-analyze
# verify accepts every unit (skipped, saying so, where systemd-analyze is missing). Also a DESTDIR
# install (the packaging layout) with the default prefix.
set -euo pipefail
root=$(mktemp -d "${TMPDIR:-/tmp}/isn-install.XXXXXX")
trap 'rm -rf "$root"' EXIT
# make test's own variables (BUILD=build-asan...) reach this make through MAKEFLAGS.
make -s --no-print-directory install PREFIX="$root/p" SYSCONFDIR="$root/p/etc" >/dev/null
make -s --no-print-directory install DESTDIR="$root/d" >/dev/null
for f in p/bin/isnd p/bin/isn-agg p/lib/systemd/system/isnd.service p/lib/systemd/system/isnd-gpu.service \
         p/lib/systemd/system/isnd@.service p/lib/systemd/system/isn-agg.service p/etc/isn/isnd.conf \
         p/etc/isn/isn-agg.conf d/usr/local/bin/isnd d/usr/local/lib/systemd/system/isn-agg.service \
         d/etc/isn/isnd.conf d/usr/local/share/doc/isn/README.md; do
  [ -e "$root/$f" ] || { echo "install_test: $f was not installed" >&2; exit 1; }
done
grep -q "^ExecStart=$root/p/bin/isnd " "$root/p/lib/systemd/system/isnd.service" ||
  { echo "install_test: isnd.service does not name the installed isnd" >&2; exit 1; }
grep -q '^path = /var/lib/isn/index$' "$root/d/etc/isn/isnd.conf" ||
  { echo "install_test: the installed isnd.conf does not serve /var/lib/isn/index" >&2; exit 1; }
"$root/p/bin/isn-agg" --config "$root/p/etc/isn/isn-agg.conf" --check-config >/dev/null
"$root/p/bin/isnd" --config "$root/p/etc/isn/isnd.conf" --print-config >/dev/null
if command -v systemd-analyze >/dev/null 2>&1; then
  cp "$root/p/lib/systemd/system/isnd@.service" "$root/isnd@p0r0.service"
  for unit in isnd.service isnd-gpu.service isn-agg.service; do
    systemd-analyze verify "$root/p/lib/systemd/system/$unit"
  done
  systemd-analyze verify "$root/isnd@p0r0.service"
  # the TLS drop-ins (LoadCredential=) on their units; the sandbox's exposure stays what it was
  for unit in isnd isn-agg; do
    mkdir -p "$root/tls/$unit.service.d"
    cp "$root/p/lib/systemd/system/$unit.service" "$root/tls/"
    cp "$root/p/share/doc/isn/systemd/$unit-tls.conf" "$root/tls/$unit.service.d/tls.conf"
    grep -q "^ExecStart=$root/p/bin/$unit .*%d/tls.crt" "$root/tls/$unit.service.d/tls.conf" ||
      { echo "install_test: $unit-tls.conf does not start the installed $unit with the credentials" >&2; exit 1; }
    systemd-analyze verify "$root/tls/$unit.service"
    if systemd-analyze security --help 2>/dev/null | grep -q -- --offline; then
      plain=$(systemd-analyze security --offline=yes --root=/ "$root/p/lib/systemd/system/$unit.service" 2>/dev/null | tail -1)
      with_tls=$(cd "$root/tls" && systemd-analyze security --offline=yes "$unit.service" 2>/dev/null | tail -1)
      [ "$plain" = "$with_tls" ] || { echo "install_test: $unit with TLS: $with_tls, without: $plain" >&2; exit 1; }
    fi
  done
  echo "install_test: installed; systemd-analyze verify accepts every unit and the TLS drop-ins"
else
  echo "install_test: installed; systemd-analyze missing: units not verified"
fi
