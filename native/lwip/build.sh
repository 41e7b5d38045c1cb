#!/usr/bin/env bash
# Builds native/lwip/lwip.wasm: lwIP 2.1.3 (the upstream tarball inside Debian
# bookworm's `lwip` source package) plus port/ (options, arch header, the
# bbnet.c boundary), compiled with Debian's clang-14 for wasm32-wasi and linked
# with lld-14 against Debian's wasi-libc. No emscripten.
#
# Reproducible: fixed file order, -ffile-prefix-map for every path, no
# timestamps, pinned source digest. CI rebuilds and compares the digest with
# the committed .wasm (test/integration/lwip-build.test.ts).
#
# The source comes from `apt-get source --download-only lwip` with a private
# sources list (one deb-src line, the system's Debian mirror), private lists
# and cache directories, so the system's apt configuration stays unchanged.
# The tarball is cached in .bb/cache/lwip/.
#
# Usage: bash native/lwip/build.sh [--out FILE]   (default native/lwip/lwip.wasm)
# Needs: clang-14 lld-14 wasi-libc (scripts/setup.sh installs them), apt-get.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$here/lwip.wasm"
[ "${1:-}" = "--out" ] && out="$2"

# The upstream lwIP 2.1.3 tarball as repacked by Debian (lwip_2.1.3+dfsg1.orig.tar.xz).
ORIG=lwip_2.1.3+dfsg1.orig.tar.xz
ORIG_SHA256=0a8276d09fc4e97bbba2f953d74af2388fc2195ea156be9d7589e297a68fde24
SUITE=bookworm
CLANG=clang-14
WASM_LD=wasm-ld-14
WASI_LIBC=/usr/lib/wasm32-wasi/libc.a
WASI_INCLUDE=/usr/include/wasm32-wasi
# Linear memory ceiling of the module, bytes (src/netstack/limits.ts keeps the same number).
MAX_MEMORY=$((64 * 1024 * 1024))
STACK_BYTES=$((128 * 1024))

fail() { echo "native/lwip/build.sh: $*" >&2; exit 1; }
for tool in "$CLANG" "$WASM_LD" apt-get sha256sum tar; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool not found (apt-get install clang-14 lld-14 wasi-libc; scripts/setup.sh does this)"
done
[ -f "$WASI_LIBC" ] || fail "$WASI_LIBC not found (apt-get install wasi-libc)"

work="$(mktemp -d "${TMPDIR:-/tmp}/bb-lwip.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# --- 1. the source tarball (cached, digest-checked) ---
cache="$repo/.bb/cache/lwip"
mkdir -p "$cache"
if [ ! -f "$cache/$ORIG" ] || ! echo "$ORIG_SHA256  $cache/$ORIG" | sha256sum -c --status; then
  mirror="${LWIP_DEBIAN_MIRROR:-}"
  if [ -z "$mirror" ]; then
    mirror="$(apt-get indextargets --format '$(SITE) $(RELEASE) $(COMPONENT)' 2>/dev/null | awk -v s="$SUITE" '$2 == s && $3 == "main" { print $1; exit }')"
  fi
  mirror="${mirror:-http://deb.debian.org/debian}"
  apt_dir="$work/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/src"
  echo "deb-src $mirror $SUITE main" >"$apt_dir/sources.list"
  apt_opts=(-q -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User="$(id -un)")
  apt-get "${apt_opts[@]}" update >"$apt_dir/log" 2>&1 || { cat "$apt_dir/log" >&2; fail "apt-get update for deb-src $mirror $SUITE main failed"; }
  (cd "$apt_dir/src" && apt-get "${apt_opts[@]}" source --download-only lwip) >>"$apt_dir/log" 2>&1 || { cat "$apt_dir/log" >&2; fail "apt-get source --download-only lwip failed"; }
  [ -f "$apt_dir/src/$ORIG" ] || fail "the lwip source package no longer ships $ORIG (found: $(ls "$apt_dir/src"))"
  echo "$ORIG_SHA256  $apt_dir/src/$ORIG" | sha256sum -c --status || fail "$ORIG does not match the pinned SHA-256 $ORIG_SHA256"
  cp "$apt_dir/src/$ORIG" "$cache/$ORIG"
fi

# --- 2. compile ---
tar -xJf "$cache/$ORIG" -C "$work"
src="$work/lwip-2.1.3/src"
[ -d "$src" ] || fail "unexpected tarball layout: no lwip-2.1.3/src"
core=(core/def.c core/inet_chksum.c core/init.c core/ip.c core/mem.c core/memp.c core/netif.c core/pbuf.c
  core/tcp.c core/tcp_in.c core/tcp_out.c core/timeouts.c
  core/ipv4/icmp.c core/ipv4/ip4.c core/ipv4/ip4_addr.c
  core/ipv6/icmp6.c core/ipv6/inet6.c core/ipv6/ip6.c core/ipv6/ip6_addr.c core/ipv6/nd6.c)
cflags=(--target=wasm32-wasi -O2 -g0 -std=c11 -mbulk-memory -fno-common
  -nostdinc -isystem "$("$CLANG" -print-resource-dir)/include" -isystem "$WASI_INCLUDE"
  "-ffile-prefix-map=$work/lwip-2.1.3=lwip-2.1.3" "-ffile-prefix-map=$here=native/lwip"
  -I "$here/port" -I "$src/include" -Wall)
# Upstream lwIP trips two harmless warnings with these options; our port code keeps them on.
lwip_quiet=(-Wno-unused-function -Wno-unused-variable -Wno-tautological-constant-out-of-range-compare)
objs=()
for f in "${core[@]}"; do
  o="$work/obj/${f//\//_}.o"
  mkdir -p "$work/obj"
  "$CLANG" "${cflags[@]}" "${lwip_quiet[@]}" -c "$src/$f" -o "$o"
  objs+=("$o")
done
"$CLANG" "${cflags[@]}" -c "$here/port/bbnet.c" -o "$work/obj/bbnet.o"
objs+=("$work/obj/bbnet.o")

# --- 3. link: a reactor module (no entry), exports named in bbnet.c, memory capped ---
"$WASM_LD" --no-entry --strip-debug --gc-sections -z "stack-size=$STACK_BYTES" --max-memory="$MAX_MEMORY" \
  -o "$work/lwip.wasm" "${objs[@]}" "$WASI_LIBC"
mkdir -p "$(dirname "$out")"
cp "$work/lwip.wasm" "$out"
echo "$(sha256sum "$out" | cut -d' ' -f1)  $(stat -c %s "$out") bytes  $out"
