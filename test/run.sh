#!/usr/bin/env bash
# Type-checks the tree (tsc --noEmit), checks its formatting (Biome, pinned
# in package.json, configured by biome.json), then runs every *.test.ts in the
# repository with Bun and ends with one line: "N passed, N failed" (plus
# ", N skipped" when Bun skipped any). The type check and the format check
# count as one test each: a type error or an unformatted file fails the run
# (`node_modules/.bin/biome format --write .` mends the second). So do the Go
# guest's `go test ./...`, `gofmt -l` and `go vet` (run from guest/).
# BB_SKIP_TYPECHECK=1 leaves all of them out (for quick local runs of a few files;
# CI never sets it).
# Extra arguments after `--` go to `bun test`, e.g.
#   bash test/run.sh -- --timeout 600000 src/domain
# Exit code: Bun's (non-zero when a test failed or no test ran).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

[ "${1:-}" = "--" ] && shift

bun=node_modules/.bin/bun
if [ ! -x "$bun" ]; then
  echo "test/run.sh: $bun is missing: run 'bash scripts/setup.sh' (or 'npm ci') first" >&2
  exit 1
fi

out=$(mktemp "${TMPDIR:-/tmp}/bb-test.XXXXXX")
trap 'rm -f "$out"' EXIT

typecheck_failed=0
typecheck_passed=0
if [ "${BB_SKIP_TYPECHECK:-}" != "1" ]; then
  echo "typecheck: tsc --noEmit -p ."
  if node_modules/.bin/tsc --noEmit -p . ; then
    echo "typecheck: ok"
    typecheck_passed=1
  else
    echo "typecheck: FAILED (the errors are above)"
    typecheck_failed=1
  fi
  echo "format: biome format ."
  if node_modules/.bin/biome format . ; then
    echo "format: ok"
    typecheck_passed=$((typecheck_passed + 1))
  else
    echo "format: FAILED (run 'node_modules/.bin/biome format --write .'; the files are above)"
    typecheck_failed=$((typecheck_failed + 1))
  fi

  # The Go guest (guest/, docs/adr/0170-static-go-guest.md): its tests, gofmt and go vet count as one test each.
  # No module is ever downloaded (GOPROXY=off); Go comes from Debian's golang-go (scripts/setup.sh).
  go_check() {
    local name=$1
    shift
    echo "$name: $*"
    if (cd guest && export GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 && "$@"); then
      echo "$name: ok"
      typecheck_passed=$((typecheck_passed + 1))
    else
      echo "$name: FAILED (the output is above)"
      typecheck_failed=$((typecheck_failed + 1))
    fi
  }
  gofmt_clean() {
    local unformatted
    unformatted=$(gofmt -l .) || return 1
    [ -z "$unformatted" ] && return 0
    echo "not gofmt-formatted (run 'gofmt -w guest'): $unformatted"
    return 1
  }
  if command -v go >/dev/null; then
    go_check "go test" go test ./...
    go_check "gofmt" gofmt_clean
    go_check "go vet" go vet ./...
  else
    echo "go: FAILED (no go in PATH: run 'bash scripts/setup.sh', which installs golang-go)"
    typecheck_failed=$((typecheck_failed + 1))
  fi
fi

# Bun 1.4 ignores bunfig.toml's [test] timeout, so the per-test default
# (tests boot real VMs under TCG) is given here; a later --timeout wins.
"$bun" test --timeout 180000 "$@" 2>&1 | tee "$out"
code=${PIPESTATUS[0]}

# The last " N pass" / " N fail" / " N skip" lines are Bun's closing summary.
count() { sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -E "^ *[0-9]+ $1\$" | tail -n 1 | tr -dc '0-9'; }
pass=$(count pass); fail=$(count fail); skip=$(count skip)
pass=${pass:-0}; fail=${fail:-0}; skip=${skip:-0}
pass=$((pass + typecheck_passed)); fail=$((fail + typecheck_failed))

# Bun prints a failure's error above its "(fail)" line, far from the end of a
# long run; repeat each one (at most 60 lines of it) so that the tail of the
# log says why, then Bun's summary again so that the log still ends with it.
if [ "$fail" -gt 0 ]; then
  echo ""
  echo "── why the failed tests failed (repeated from above) ──"
  sed 's/\x1b\[[0-9;]*m//g' "$out" | awk '
    /^\(pass\)|^\(skip\)|^\(todo\)|^[^ ].*\.test\.ts:$/ { n = 0; next }
    /^\(fail\)/ { print ""; print $0; s = (n > 60) ? n - 60 : 0; for (i = s; i < n; i++) print "  " buf[i]; n = 0; next }
    { buf[n++] = $0 }'
  echo ""
  sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -E "^ *[0-9]+ (pass|fail|skip)$|^ *[0-9]+ expect\(\) calls$|^Ran [0-9]+ tests" | tail -n 5
fi

echo ""
if [ "$skip" -gt 0 ]; then
  echo "$pass passed, $fail failed, $skip skipped"
else
  echo "$pass passed, $fail failed"
fi

if [ "$typecheck_failed" -gt 0 ]; then
  echo "test/run.sh: the type check, a format check or a Go check failed (see 'typecheck:', 'format:', 'go test:', 'gofmt:', 'go vet:' above)" >&2
  code=1
fi
if [ "$code" -eq 0 ] && [ $((pass + fail + skip - typecheck_passed)) -eq 0 ]; then
  echo "test/run.sh: no test ran" >&2
  code=1
fi
exit "$code"
