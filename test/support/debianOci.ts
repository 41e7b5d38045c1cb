/**
 * Test support: an OCI image layout made here from a Debian root file
 * system (mmdebstrap's tarball, src/image/debianRootfs.ts), with a
 * multi-layer history like a Dockerfile's: layer 0 is the Debian root,
 * layer 1 adds a `ci` user, a CI entrypoint and some files, layer 2
 * deletes files and directories of the layers below (whiteouts and an
 * opaque directory). Written with our own layout writer
 * (src/image/oci/testLayout.ts), no container tool.
 */
import { readFileSync } from "node:fs";
import { createReadStream } from "node:fs";
import { readTar } from "../../src/image/oci/tar.ts";
import { makeTar, writeOciLayout, type TestLayout } from "../../src/image/oci/testLayout.ts";

/** The image's entrypoint: runs the delivered payload as a shell script. */
export const CI_JOB_ENTRYPOINT = `#!/bin/sh
echo "ci-job: running a $BEACHBALL_BOOTSTRAP_CONTENT_TYPE payload as $(id -un) in $(pwd)"
exec /bin/sh "$BEACHBALL_BOOTSTRAP_PATH"
`;

/** A CI-like job: compile and test a small C program with the image's own gcc. Prints `job: all tests passed`. */
export const GCC_JOB = `set -e
echo "job: $(id -un) on $(uname -r), gcc $(gcc -dumpversion)"
dir=$(mktemp -d)
cd "$dir"
cat > sum.c <<'C'
#include <stdio.h>
#include <stdlib.h>
long sum(long n) { long s = 0; for (long i = 1; i <= n; i++) s += i; return s; }
int main(int argc, char **argv) { printf("%ld\\n", sum(argc > 1 ? atol(argv[1]) : 10)); return 0; }
C
gcc -O2 -Wall -Werror -o sum sum.c
test "$(./sum 100)" = 5050 && echo "test: sum(100) = 5050 ok"
test "$(./sum 100000)" = 5000050000 && echo "test: sum(100000) ok"
echo "job: all tests passed"
`;

async function member(tarPath: string, name: string): Promise<string> {
  for await (const e of readTar(createReadStream(tarPath, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>)) {
    if (e.header.path.replace(/^\.\//, "") !== name) continue;
    let s = "";
    for await (const c of e.body) s += new TextDecoder().decode(c);
    return s;
  }
  throw new Error(`${name} not in ${tarPath}`);
}

/** Writes the three-layer layout to `dir` from the Debian rootfs tarball. */
export async function writeDebianOciLayout(dir: string, rootfsTar: string): Promise<TestLayout> {
  const passwd = await member(rootfsTar, "etc/passwd");
  const group = await member(rootfsTar, "etc/group");
  const layer1 = makeTar([
    { path: "etc/passwd", body: `${passwd}ci:x:1000:1000:CI:/home/ci:/bin/sh\n` },
    { path: "etc/group", body: `${group}ci:x:1000:\n` },
    { path: "home/ci/", uid: 1000, gid: 1000, mode: 0o755 },
    { path: "usr/local/bin/ci-job", body: CI_JOB_ENTRYPOINT, mode: 0o755 },
    { path: "opt/junk/", mode: 0o755 },
    { path: "opt/junk/big.bin", body: new Uint8Array(256 * 1024).fill(7) },
    { path: "opt/junk/keep.txt", body: "kept\n" },
  ]);
  const layer2 = makeTar([
    { path: "opt/junk/.wh.big.bin" },
    { path: "usr/share/.wh.doc" },
    { path: "usr/share/man/.wh..wh..opq" },
    { path: "usr/share/man/README.beachball", body: "man pages were removed by layer 2\n" },
  ]);
  return writeOciLayout(dir, [readFileSync(rootfsTar), layer1, layer2], {
    gzip: false,
    ref: "debian-ci:12",
    config: {
      Entrypoint: ["/usr/local/bin/ci-job"],
      Env: ["CI=true", "PATH=/usr/local/bin:/usr/bin:/bin"],
      WorkingDir: "/home/ci",
      User: "ci",
    },
  });
}

/** The sshd image's entrypoint: runs the delivered payload (which configures and execs sshd) as root. */
export const PAYLOAD_ENTRYPOINT = `#!/bin/sh
exec /bin/sh "$BEACHBALL_BOOTSTRAP_PATH"
`;

/**
 * Writes a two-layer layout to `dir`: the Debian root with OpenSSH's server
 * (src/image/debianRootfs.ts SSHD_RECIPE) and a layer with the entrypoint
 * that runs the payload as root in /root.
 */
export async function writeSshdOciLayout(dir: string, rootfsTar: string): Promise<TestLayout> {
  const layer1 = makeTar([{ path: "usr/local/bin/run-payload", body: PAYLOAD_ENTRYPOINT, mode: 0o755 }]);
  return writeOciLayout(dir, [readFileSync(rootfsTar), layer1], {
    gzip: false,
    ref: "debian-sshd:12",
    config: {
      Entrypoint: ["/usr/local/bin/run-payload"],
      Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
      WorkingDir: "/root",
      User: "",
    },
  });
}

/**
 * The payload that turns the sshd image into an SSH server: `authorizedKey`
 * for root, `hostKey` (an OpenSSH private key) as the only host key, the
 * guest's IPv6 addresses and routes on the console, then `sshd -D -e`.
 */
export function sshdPayload(authorizedKey: string, hostKey: string): string {
  return `set -e
mkdir -p /root/.ssh /run/sshd
chmod 700 /root/.ssh
cat > /root/.ssh/authorized_keys <<'KEY'
${authorizedKey.trim()}
KEY
chmod 600 /root/.ssh/authorized_keys
umask 077
cat > /etc/ssh/bb_host_ed25519_key <<'KEY'
${hostKey.trim()}
KEY
echo "sshd-payload: $(ip -6 addr show dev eth0 scope global | grep inet6) / $(ip -6 route show default)"
exec /usr/sbin/sshd -D -e -h /etc/ssh/bb_host_ed25519_key -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no
`;
}
