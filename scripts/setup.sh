#!/usr/bin/env bash
# Prepares a fresh Debian/Ubuntu machine (with Node.js and npm) to run
# Beachball: the Debian packages the agent and the dev image builder call,
# then the npm dependencies (Bun comes from the `bun` devDependency).
# Safe to run again. Run as root, or as a user with sudo.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Runtime tools: QEMU (microvm machine), busybox for the guest, mkfs.ext4,
# cpio for the initramfs, ip/nft for placement networking, depmod/modprobe,
# xz for the kernel, pgrep, and TLS roots for apt and npm. The image builder
# adds squashfs-tools (bb image build's squashfs roots) and mmdebstrap (the
# Debian reference image and the image tests' Debian root).
PACKAGES=(qemu-system-x86 busybox-static e2fsprogs cpio iproute2 nftables kmod xz-utils procps ca-certificates squashfs-tools mmdebstrap)
# lwIP as WebAssembly (native/lwip/build.sh; CI rebuilds it and checks the committed .wasm's digest).
PACKAGES+=(clang-14 lld-14 wasi-libc)
# WireGuard: libsodium23 (the fast AEAD through bun:ffi), and wireguard-go,
# wireguard-tools (wg) and iputils-ping for the interop test against Debian's WireGuard.
PACKAGES+=(libsodium23 wireguard-go wireguard-tools iputils-ping)
# Relay: openssl makes the test's self-signed certificate; strace shows the relay process writes no file.
PACKAGES+=(openssl strace)
# Private networking end to end: Debian's ssh, scp and ssh-keygen on the "laptop" (test/e2e/private-ssh.test.ts; sshd runs inside the VM image).
PACKAGES+=(openssh-client)
# The guest binary images carry (guest/, static Go, standard library only; docs/adr/0170-static-go-guest.md).
PACKAGES+=(golang-go)
# Packaging (packaging/, test/packaging/): rpmbuild, lintian, rpmlint, readelf,
# and systemd-nspawn to boot the package test's container.
PACKAGES+=(rpm lintian rpmlint binutils systemd-container)
# Shell completion (src/command/completion.ts): the test runs the zsh and fish scripts in those shells.
PACKAGES+=(zsh fish)

log=$(mktemp "${TMPDIR:-/tmp}/bb-setup.XXXXXX")
trap 'rm -f "$log"' EXIT

step() { printf 'setup: %s\n' "$*"; }
fail() { printf 'setup: %s\n' "$*" >&2; exit 1; }

# Runs a command with its output kept in $log; on failure prints that output and stops.
quiet() {
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    fail "failed: $*"
  fi
}

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || fail "run as root (or install sudo): apt-get needs root"
  as_root=(sudo)
fi
command -v apt-get >/dev/null 2>&1 || fail "apt-get not found: this script supports Debian and Ubuntu"
command -v npm >/dev/null 2>&1 || fail "npm not found: install Node.js and npm first"

export DEBIAN_FRONTEND=noninteractive

# shellcheck source=lib/apt-wait.sh
. scripts/lib/apt-wait.sh

# apt_get_waiting waits (bounded, and says so) while unattended-upgrades or another apt holds the lock.
step "apt-get update (the dev image builder downloads the kernel with apt-get download)"
apt_get_waiting update -q || fail "failed: apt-get update"

step "apt-get install ${PACKAGES[*]}"
apt_get_waiting install -y -q --no-install-recommends "${PACKAGES[@]}" || fail "failed: apt-get install"

if [ -f package-lock.json ]; then
  step "npm ci"
  quiet npm ci --no-audit --no-fund --loglevel=error
else
  step "npm install (no package-lock.json)"
  quiet npm install --no-audit --no-fund --loglevel=error
fi

[ -x node_modules/.bin/bun ] || fail "node_modules/.bin/bun is missing after npm install"
qemu=$(qemu-system-x86_64 --version 2>/dev/null | head -n 1 | sed 's/^QEMU emulator version //')
kvm="no /dev/kvm (TCG)"
[ -e /dev/kvm ] && kvm="/dev/kvm present"
step "ready: node $(node --version), npm $(npm --version), bun $(node_modules/.bin/bun --version), qemu ${qemu:-missing}, ${kvm}"
