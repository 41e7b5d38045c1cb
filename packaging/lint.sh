#!/usr/bin/env bash
# Lints built packages: lintian (Debian's policy checker, every tag down to
# pedantic fails except those overridden in packaging/deb/lintian-overrides)
# and rpmlint (with packaging/rpm/rpmlint.toml, whose filters say why).
#
#   bash packaging/lint.sh PACKAGE.deb|PACKAGE.rpm ...
#
# Exits 1 when a linter reports anything, 2 when a linter is missing.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
status=0
for pkg in "$@"; do
  case "$pkg" in
    *.deb)
      command -v lintian >/dev/null 2>&1 || { echo "packaging/lint.sh: lintian not found: apt-get install lintian" >&2; exit 2; }
      echo "lintian $(basename "$pkg")"
      # Root is how CI runs; lintian only unpacks into a temporary directory.
      out=$(lintian --pedantic --display-info --fail-on error,warning,info,pedantic "$pkg" 2>&1)
      code=$?
      out=$(printf '%s\n' "$out" | grep -v -e '^running with root privileges is not recommended!$' -e '^$')
      [ -n "$out" ] && printf '%s\n' "$out" >&2
      { [ "$code" -ne 0 ] || [ -n "$out" ]; } && status=1
      ;;
    *.rpm)
      command -v rpmlint >/dev/null 2>&1 || { echo "packaging/lint.sh: rpmlint not found: apt-get install rpmlint" >&2; exit 2; }
      echo "rpmlint $(basename "$pkg")"
      out=$(rpmlint -c "$here/rpm/rpmlint.toml" "$pkg" 2>&1)
      code=$?
      # rpmlint always prints its header and a summary line; anything with E:/W: is a finding.
      if [ "$code" -ne 0 ] || printf '%s\n' "$out" | grep -qE ': (E|W): '; then
        printf '%s\n' "$out" | grep -E ': (E|W|I): |badness|checked' >&2
        status=1
      fi
      ;;
    *) echo "packaging/lint.sh: not a .deb or .rpm: $pkg" >&2; exit 2 ;;
  esac
done
exit "$status"
