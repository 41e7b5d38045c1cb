#!/usr/bin/env bash
# Builds the `beachball` .deb (with dpkg-deb) and .rpm (with rpmbuild from
# Debian's `rpm` package) around one compiled `bb` binary.
#
#   bash packaging/build.sh [--binary dist/bb] [--out dist/packages]
#                           [--version X.Y.Z] [--fast] [--deb-only | --rpm-only]
#
# Contents (both formats): /usr/bin/bb; the systemd units from deploy/systemd
# (none enabled: each role needs configuration first); the sysusers.d entry
# for the `beachball` user (created by the maintainer scripts);
# /etc/beachball/ with scheduler.env (a config file); the man page; docs, the
# example manifest and the example relay config under /usr/share/doc/beachball.
# --fast picks cheap compression (tests); the default is xz for both formats.
#
# The binary is never stripped: `bun build --compile` keeps the bundled
# JavaScript in the ELF section `.bun`, and strip removes it.
# Prints the path of each package built, one per line, on stdout.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD

binary=dist/bb
out=dist/packages
version=""
fast=0
want_deb=1
want_rpm=1

fail() { printf 'packaging/build.sh: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '5,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,3\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --version) version=${2:?}; shift 2 ;;
    --fast) fast=1; shift ;;
    --deb-only) want_rpm=0; shift ;;
    --rpm-only) want_deb=0; shift ;;
    -h|--help) usage ;;
    *) printf 'packaging/build.sh: unknown argument %s\n' "$1" >&2; usage ;;
  esac
done

[ -n "$version" ] || version=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' package.json | head -n 1)
[[ "$version" =~ ^[0-9]+(\.[0-9]+)*$ ]] || fail "version must be dotted digits, got '$version'"
[ -x "$binary" ] || fail "$binary is missing or not executable: run 'npm run build' first (or pass --binary)"
readelf -S --wide "$binary" 2>/dev/null | grep -q ' \.bun ' ||
  fail "$binary has no .bun section: it is not a 'bun build --compile' binary, or it was stripped"
got=$("$binary" --version 2>/dev/null) || fail "$binary --version failed"
[ "$got" = "$version" ] || fail "$binary --version prints '$got', the package version is '$version'"

case "$(readelf -h "$binary" | sed -n 's/^ *Machine: *//p')" in
  *X86-64*) deb_arch=amd64; rpm_arch=x86_64 ;;
  *AArch64*) deb_arch=arm64; rpm_arch=aarch64 ;;
  *) fail "unsupported machine type of $binary" ;;
esac

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bb-packaging.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A reproducible timestamp for the changelog, man page and archives: the last commit's.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
date_rfc2822=$(LC_ALL=C date -u -d "@$SOURCE_DATE_EPOCH" -R)
date_rpm=$(LC_ALL=C date -u -d "@$SOURCE_DATE_EPOCH" '+%a %b %d %Y')
maintainer="Beachball maintainers <maintainers@beachball.invalid>"
summary="Disposable microVMs on your own Linux hosts"
units=(beachball-scheduler.service beachball-agent.service beachball-relay.service)

# Stages the file tree shared by both formats under $1; $2 is the unit directory.
stage() {
  local root=$1 unitdir=$2 doc=$1/usr/share/doc/beachball
  install -d -m 0755 "$root/usr/bin" "$root$unitdir" "$root/usr/lib/sysusers.d" "$root/etc/beachball" \
    "$root/usr/share/man/man1" "$doc/examples"
  install -m 0755 "$binary" "$root/usr/bin/bb"
  for u in "${units[@]}"; do install -m 0644 "deploy/systemd/$u" "$root$unitdir/$u"; done
  install -m 0644 packaging/sysusers.conf "$root/usr/lib/sysusers.d/beachball.conf"
  install -m 0644 packaging/scheduler.env "$root/etc/beachball/scheduler.env"
  gzip -9n <packaging/bb.1 >"$root/usr/share/man/man1/bb.1.gz"
  chmod 0644 "$root/usr/share/man/man1/bb.1.gz"
  install -m 0644 docs/install.md docs/operate.md docs/manifest.md docs/relay.md docs/connect.md docs/cli.md "$doc/"
  install -m 0644 deploy/manifest.example.json "$doc/examples/manifest.example.json"
  install -m 0644 deploy/relay.example.json "$doc/examples/relay.example.json"
  install -m 0644 packaging/copyright "$doc/copyright"
  printf 'beachball (%s) unstable; urgency=medium\n\n  * Release %s.\n\n -- %s  %s\n' \
    "$version" "$version" "$maintainer" "$date_rfc2822" | gzip -9n >"$doc/changelog.gz"
  chmod 0644 "$doc/changelog.gz"
}

build_deb() {
  local root=$work/deb deb="$out/beachball_${version}_${deb_arch}.deb"
  stage "$root" /lib/systemd/system
  install -d -m 0755 "$root/DEBIAN" "$root/usr/share/lintian/overrides"
  install -m 0644 packaging/deb/lintian-overrides "$root/usr/share/lintian/overrides/beachball"
  for s in postinst prerm postrm; do install -m 0755 "packaging/deb/$s" "$root/DEBIAN/$s"; done
  printf '/etc/beachball/scheduler.env\n' >"$root/DEBIAN/conffiles"
  chmod 0644 "$root/DEBIAN/conffiles"
  local size
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$deb_arch/" -e "s/@SIZE@/$size/" \
    -e "s/@MAINTAINER@/$maintainer/" -e "s/@SUMMARY@/$summary/" packaging/deb/control.in >"$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f ! -path ./etc/\* -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
  chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
  find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  local z=(-Zxz -z6)
  [ "$fast" -eq 1 ] && z=(-Zgzip -z1)
  dpkg-deb --root-owner-group "${z[@]}" --build "$root" "$deb" >/dev/null
  echo "$deb"
}

build_rpm() {
  command -v rpmbuild >/dev/null 2>&1 || fail "rpmbuild not found: apt-get install rpm"
  local top=$work/rpm payload=w6.xzdio
  [ "$fast" -eq 1 ] && payload=w1.gzdio
  stage "$top/stage" /usr/lib/systemd/system
  mkdir -p "$top/RPMS" "$top/BUILD" "$top/SPECS"
  sed -e "s/@VERSION@/$version/" -e "s/@SUMMARY@/$summary/" -e "s/@DATE@/$date_rpm/" \
    -e "s/@MAINTAINER@/$maintainer/" packaging/rpm/beachball.spec.in >"$top/SPECS/beachball.spec"
  rpmbuild -bb --quiet --target "$rpm_arch" \
    --define "_topdir $top" --define "_stagedir $top/stage" --define "_binary_payload $payload" \
    --define "_buildhost beachball.invalid" --define "use_source_date_epoch_as_buildtime 1" \
    "$top/SPECS/beachball.spec" >"$work/rpmbuild.log" 2>&1 || { cat "$work/rpmbuild.log" >&2; fail "rpmbuild failed"; }
  local rpm
  rpm=$(find "$top/RPMS" -name '*.rpm' | head -n 1)
  [ -n "$rpm" ] || fail "rpmbuild produced no package"
  cp "$rpm" "$out/"
  echo "$out/$(basename "$rpm")"
}

[ "$want_deb" -eq 1 ] && build_deb
[ "$want_rpm" -eq 1 ] && build_rpm
exit 0
