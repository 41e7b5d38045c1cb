#!/usr/bin/env bash
# Runs every *.test.ts in the repository with Bun and ends with one line:
# "N passed, N failed" (plus ", N skipped" when Bun skipped any).
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

# Bun 1.4 ignores bunfig.toml's [test] timeout, so the per-test default
# (tests boot real VMs under TCG) is given here; a later --timeout wins.
"$bun" test --timeout 180000 "$@" 2>&1 | tee "$out"
code=${PIPESTATUS[0]}

# The last " N pass" / " N fail" / " N skip" lines are Bun's closing summary.
count() { sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -E "^ *[0-9]+ $1\$" | tail -n 1 | tr -dc '0-9'; }
pass=$(count pass); fail=$(count fail); skip=$(count skip)
pass=${pass:-0}; fail=${fail:-0}; skip=${skip:-0}

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

if [ "$code" -eq 0 ] && [ $((pass + fail + skip)) -eq 0 ]; then
  echo "test/run.sh: no test ran" >&2
  code=1
fi
exit "$code"
