#!/usr/bin/env bash
# Type-checks the tree (tsc --noEmit), checks its formatting (Biome, pinned
# in package.json, configured by biome.json), then runs every *.test.ts in the
# repository with Bun and ends with one line: "N passed, N failed" (plus
# ", N skipped" when Bun skipped any). The type check and the format check
# count as one test each: a type error or an unformatted file fails the run
# (`node_modules/.bin/biome format --write .` mends the second).
# BB_SKIP_TYPECHECK=1 leaves both out (for quick local runs of a few files;
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
  echo "test/run.sh: the type check or the format check failed (see 'typecheck:' and 'format:' above)" >&2
  code=1
fi
if [ "$code" -eq 0 ] && [ $((pass + fail + skip - typecheck_passed)) -eq 0 ]; then
  echo "test/run.sh: no test ran" >&2
  code=1
fi
exit "$code"
