# apt_get_waiting ARGS...: runs `apt-get ARGS` (as root through "${as_root[@]}"
# when the caller sets it) and, while another apt or dpkg holds its lock
# (unattended-upgrades on a fresh cloud VM, an `apt-get update` in another
# shell), waits for it instead of failing: it says so once per holder, retries
# every APT_LOCK_POLL_SECONDS (default 2) and gives up after
# APT_LOCK_WAIT_SECONDS (default 300) with a message naming the holder.
# apt's own DPkg::Lock::Timeout is not enough: apt 2.6 (Debian 12) applies it
# to the dpkg lock only, and `apt-get update` still fails at once on
# /var/lib/apt/lists/lock (measured).
# Any other failure prints apt's output and returns 1. Sourced by
# scripts/setup.sh; test/setup-apt-lock.test.ts runs it alone.

APT_LOCK_WAIT_SECONDS=${APT_LOCK_WAIT_SECONDS:-300}
APT_LOCK_POLL_SECONDS=${APT_LOCK_POLL_SECONDS:-2}

apt_get_waiting() {
  local out waited=0 holder said=""
  out=$(mktemp "${TMPDIR:-/tmp}/bb-apt.XXXXXX")
  while :; do
    if ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get "$@" >"$out" 2>&1; then
      rm -f "$out"
      return 0
    fi
    if ! grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock' "$out"; then
      cat "$out" >&2
      rm -f "$out"
      return 1
    fi
    holder=$(grep -oE 'lock [^ ]+\. It is held by process [0-9]+( \([^)]*\))?' "$out" | head -n 1 | sed 's/\. It is held by / held by /')
    holder=${holder:-a lock held by another apt or dpkg}
    if [ "$waited" -ge "$APT_LOCK_WAIT_SECONDS" ]; then
      cat "$out" >&2
      rm -f "$out"
      printf 'setup: gave up waiting for the apt lock after %ss (%s); run setup again once it is free, or set APT_LOCK_WAIT_SECONDS\n' "$waited" "$holder" >&2
      return 1
    fi
    if [ "$holder" != "$said" ]; then
      printf 'setup: waiting for the apt lock (%s), up to %ss\n' "$holder" "$((APT_LOCK_WAIT_SECONDS - waited))"
      said=$holder
    fi
    sleep "$APT_LOCK_POLL_SECONDS"
    waited=$((waited + APT_LOCK_POLL_SECONDS))
  done
}
