/**
 * `bb image …`: operator commands for images (spec "Images").
 *
 * - `dev-build`: builds the dev image from Debian packages and this
 *   repository's `bb` binary, signs it with the dev key in the cache
 *   directory, and prints its digest and the dev public key.
 * - `keygen --out KEYFILE`: new Ed25519 key; KEYFILE (mode 0600) holds the
 *   base64 32-byte seed, KEYFILE.pub the base64 public key, which is printed.
 * - `sign --key KEYFILE DIR`: signs DIR/manifest.json in place; prints the
 *   digest (unchanged by signing).
 * - `verify --trusted-key PUB [--trusted-key PUB2 …] DIR`: checks the
 *   signature, digest and every artifact; prints the digest (exit 0) or the
 *   stable code (exit 1). PUB is a base64 key or a file holding one.
 * - `build (--oci-layout DIR | --docker-archive FILE) --key KEYFILE --out
 *   DIR`: converts an OCI image into a signed squashfs image; prints its
 *   digest, or the stable refusal code (IMAGE_LAYER_PATH_ESCAPE, …).
 * - `reference-build --key KEYFILE --out DIR`: builds the Debian reference
 *   image (systemd, mmdebstrap from Debian's mirror, cached in --cache).
 * - `publish --out BASE DIR…`: lays image directories out for a static web
 *   server (`BASE/<digest hex>/…`), the layout the agent's
 *   `--image-source http://…` fetches.
 *
 * Only translates arguments to src/image; exit codes per src/command/run.ts:
 * 0 ok, 1 error, 2 usage. Build steps show on a spinner on a terminal and
 * as lines on stderr elsewhere. Must never: print or log a private key.
 */
import { resolve } from "node:path";
import type { ArgDef } from "citty";
import { consola } from "consola";
import { pickGuestBinary } from "../image/bbBinary.ts";
import { UsageError } from "../command/run.ts";
import { imageErrorCode } from "../image/errors.ts";
import { command } from "../command/define.ts";
import { flagValues } from "../command/argv.ts";
import { progress } from "../command/terminal.ts";
import { integerFlag } from "../command/values.ts";

const devBuild = command({
  meta: {
    name: "dev-build",
    description: "Build the dev image (Debian kernel + busybox + bb), sign it with the dev key, print its digest",
  },
  args: {
    out: { type: "string", valueHint: "DIR", description: "Image output directory", default: ".bb/images/dev" },
    cache: {
      type: "string",
      valueHint: "DIR",
      description: "Cache directory for the kernel download",
      default: ".bb/cache",
    },
    bb: { type: "string", valueHint: "FILE", description: "bb binary to put in the image (default: compile dist/bb)" },
    json: { type: "boolean", description: "Print the result as JSON", default: false },
  },
  examples: ["bb image dev-build", "bb image dev-build --out .bb/images/dev --cache .bb/cache --json"],
  async run({ args }) {
    const p = progress(process.stderr, args.json);
    try {
      const { buildDevImage } = await import("../image/devBuild.ts");
      const started = performance.now();
      const r = await buildDevImage({
        outDir: args.out,
        cacheDir: args.cache,
        bbBinaryPath: await pickGuestBinary(args.bb),
        log: args.json ? undefined : p.step,
      });
      p.stop();
      const ms = Math.round(performance.now() - started);
      if (args.json)
        console.log(
          JSON.stringify({ digest: r.digest, dir: r.dir, reused: r.reused, buildMs: ms, publicKey: r.publicKey }),
        );
      else {
        consola.success(`${r.reused ? "reused" : "built"} ${r.dir} in ${ms} ms`);
        consola.info(`signed with dev key ${r.publicKey} (also in ${r.dir}/trusted-dev-key.pub)`);
        console.log(r.digest);
      }
    } catch (e) {
      p.stop();
      consola.error((e as Error).message);
      process.exitCode = 1;
    }
  },
});

/**
 * Prints an error and sets the exit code 1. A UsageError is rethrown, so
 * the entry point prints it as every command's usage error does (exit 2);
 * with --json its result line comes first, code USAGE.
 */
function fail(e: unknown, json: boolean): void {
  if (e instanceof UsageError) {
    if (json) console.log(JSON.stringify({ ok: false, code: e.code, message: e.message }));
    throw e;
  }
  const stable = imageErrorCode(e);
  if (json) console.log(JSON.stringify({ ok: false, code: stable ?? "ERROR", message: (e as Error).message }));
  else {
    if (stable) console.log(stable);
    consola.error((e as Error).message);
  }
  process.exitCode = (e as { exitCode?: number }).exitCode ?? 1;
}

const usage = (msg: string) => new UsageError(msg);

const keygen = command({
  meta: {
    name: "keygen",
    description: "Create an Ed25519 image signing key (KEYFILE mode 0600, KEYFILE.pub) and print the public key",
  },
  args: {
    out: { type: "string", valueHint: "KEYFILE", description: "Private key file to create (must not exist)" },
    json: { type: "boolean", description: "Print the result as JSON", default: false },
  },
  examples: ["bb image keygen --out op.key"],
  async run({ args }) {
    try {
      if (!args.out) throw usage("--out KEYFILE is required");
      const { createPrivateKeyFile } = await import("../image/keyFile.ts");
      const { publicKey } = createPrivateKeyFile(args.out);
      await Bun.write(`${args.out}.pub`, `${publicKey}\n`);
      if (args.json)
        console.log(
          JSON.stringify({ publicKey, keyFile: resolve(args.out), publicKeyFile: resolve(`${args.out}.pub`) }),
        );
      else console.log(publicKey);
    } catch (e) {
      fail(e, args.json);
    }
  },
});

const sign = command({
  meta: { name: "sign", description: "Sign DIR/manifest.json in place with KEYFILE and print the image digest" },
  args: {
    key: { type: "string", valueHint: "KEYFILE", description: "Private key file (from bb image keygen)" },
    dir: { type: "positional", description: "Image directory", required: true },
    json: { type: "boolean", description: "Print the result as JSON", default: false },
  },
  examples: ["bb image sign --key op.key .bb/images/myimg"],
  async run({ args }) {
    try {
      if (!args.key) throw usage("--key KEYFILE is required");
      const { readPrivateKeyFile, signImageDir } = await import("../image/keyFile.ts");
      const key = readPrivateKeyFile(args.key);
      const { digest } = signImageDir(args.dir, key.privateKey);
      if (args.json) console.log(JSON.stringify({ digest, publicKey: key.publicKey }));
      else console.log(digest);
    } catch (e) {
      fail(e, args.json);
    }
  },
});

const verify = command({
  meta: {
    name: "verify",
    description:
      "Verify DIR's signature (any --trusted-key), digest and artifacts; print the digest or the stable error code",
  },
  args: {
    "trusted-key": {
      type: "string",
      valueHint: "KEY",
      description: "Trusted public key (base64) or a file holding one; repeatable",
    },
    dir: { type: "positional", description: "Image directory", required: true },
    json: { type: "boolean", description: "Print the result as JSON", default: false },
  },
  examples: [
    "bb image verify --trusted-key op.key.pub .bb/images/myimg",
    "bb image verify --trusted-key op.key.pub --trusted-key old.key.pub --json .bb/images/myimg",
  ],
  async run({ args, rawArgs, cmd }) {
    try {
      const keyArgs = flagValues(rawArgs, cmd.args as Record<string, ArgDef>, "trusted-key");
      if (keyArgs.length === 0) throw usage("at least one --trusted-key is required");
      const { readManifestFile, readPublicKeyArg } = await import("../image/keyFile.ts");
      const { verifyManifestSignature } = await import("../image/signing.ts");
      const { verifyImage } = await import("../image/verify.ts");
      const { imageDigest } = await import("../protocol/image.ts");
      const trusted = keyArgs.map(readPublicKeyArg);
      const manifest = readManifestFile(args.dir);
      const key = verifyManifestSignature(manifest, trusted);
      const digest = imageDigest(manifest);
      await verifyImage(resolve(args.dir), digest);
      if (args.json) console.log(JSON.stringify({ ok: true, digest, publicKey: key }));
      else console.log(digest);
    } catch (e) {
      fail(e, args.json);
    }
  },
});

const build = command({
  meta: {
    name: "build",
    description:
      "Convert an OCI image (layout dir or docker-archive tarball) into a signed squashfs image; print its digest",
  },
  args: {
    "oci-layout": {
      type: "string",
      valueHint: "DIR",
      description: "OCI image layout directory (oci-layout, index.json, blobs/)",
    },
    "docker-archive": { type: "string", valueHint: "FILE", description: "docker-archive tarball (docker save)" },
    ref: {
      type: "string",
      valueHint: "REF",
      description: "Image to pick: org.opencontainers.image.ref.name annotation or RepoTag",
    },
    key: {
      type: "string",
      valueHint: "KEYFILE",
      description: "Private key file that signs the manifest (from bb image keygen)",
    },
    out: { type: "string", valueHint: "DIR", description: "Image output directory (replaced)" },
    cache: {
      type: "string",
      valueHint: "DIR",
      description: "Cache directory for the kernel download",
      default: ".bb/cache",
    },
    bb: {
      type: "string",
      valueHint: "FILE",
      description: "Guest binary to put in the image (default: compile dist/beachball-guest)",
    },
    "compression-level": {
      type: "string",
      valueHint: "LEVEL",
      description: "zstd level of the squashfs root, 1-22 (default 15)",
    },
    json: { type: "boolean", description: "Print the result as JSON", default: false },
  },
  examples: [
    "bb image build --oci-layout ./layout --key op.key --out .bb/images/myimg",
    "bb image build --docker-archive image.tar --ref app:1 --key op.key --out .bb/images/app",
  ],
  async run({ args }) {
    const p = progress(process.stderr, args.json);
    try {
      const level =
        args["compression-level"] === undefined
          ? undefined
          : integerFlag("--compression-level", args["compression-level"], { min: 1, max: 22 });
      if (!args["oci-layout"] === !args["docker-archive"])
        throw usage("give exactly one of --oci-layout DIR or --docker-archive FILE");
      if (!args.key) throw usage("--key KEYFILE is required");
      if (!args.out) throw usage("--out DIR is required");
      const { readPrivateKeyFile } = await import("../image/keyFile.ts");
      const { buildOciImage } = await import("../image/oci/build.ts");
      const key = readPrivateKeyFile(args.key);
      const started = performance.now();
      const r = await buildOciImage({
        input: args["oci-layout"]
          ? { kind: "oci-layout", dir: args["oci-layout"] }
          : { kind: "docker-archive", path: args["docker-archive"]! },
        ...(args.ref ? { ref: args.ref } : {}),
        outDir: args.out,
        cacheDir: args.cache,
        privateKey: key.privateKey,
        ...(level ? { compressionLevel: level } : {}),
        guestBinaryPath: await pickGuestBinary(args.bb, args.json ? undefined : p.step),
        log: args.json ? undefined : p.step,
      });
      p.stop();
      const ms = Math.round(performance.now() - started);
      if (args.json)
        console.log(
          JSON.stringify({
            ok: true,
            digest: r.digest,
            dir: r.dir,
            buildMs: ms,
            publicKey: key.publicKey,
            ...r.stats,
            dropped: r.dropped,
          }),
        );
      else {
        if (r.dropped.count) {
          consola.warn(
            `squashfs cannot hold ${r.dropped.count} extended attribute(s) or ACL(s) of the image; left out:`,
          );
          for (const item of r.dropped.items) consola.warn(`  ${item}`);
          if (r.dropped.count > r.dropped.items.length)
            consola.warn(`  … and ${r.dropped.count - r.dropped.items.length} more`);
        }
        consola.success(
          `built ${r.dir} in ${ms} ms (${r.stats.layers} layers, ${r.stats.entries} entries, rootfs ${r.stats.rootfsBytes} bytes)`,
        );
        console.log(r.digest);
      }
    } catch (e) {
      p.stop();
      fail(e, args.json);
    }
  },
});

const referenceBuild = command({
  meta: {
    name: "reference-build",
    description: "Build the Debian reference image (systemd PID 1, beachball-guest as a service); print its digest",
  },
  args: {
    key: { type: "string", valueHint: "KEYFILE", description: "Private key file that signs the manifest" },
    out: {
      type: "string",
      valueHint: "DIR",
      description: "Image output directory (replaced)",
      default: ".bb/images/reference",
    },
    cache: {
      type: "string",
      valueHint: "DIR",
      description: "Cache for the kernel and the Debian root tarball",
      default: ".bb/cache",
    },
    bb: {
      type: "string",
      valueHint: "FILE",
      description: "Guest binary to install (default: compile dist/beachball-guest)",
    },
    json: { type: "boolean", description: "Print the result as JSON", default: false },
  },
  examples: [
    "bb image reference-build --key op.key",
    "bb image reference-build --key op.key --out .bb/images/reference --json",
  ],
  async run({ args }) {
    const p = progress(process.stderr, args.json);
    try {
      if (!args.key) throw usage("--key KEYFILE is required");
      const { readPrivateKeyFile } = await import("../image/keyFile.ts");
      const { ensureDebianRootfsTar } = await import("../image/debianRootfs.ts");
      const { buildReferenceImage } = await import("../image/referenceBuild.ts");
      const log = args.json ? undefined : p.step;
      const key = readPrivateKeyFile(args.key);
      const r = await buildReferenceImage({
        rootfsTar: await ensureDebianRootfsTar(args.cache, undefined, log),
        guestBinaryPath: await pickGuestBinary(args.bb, log),
        outDir: args.out,
        cacheDir: args.cache,
        privateKey: key.privateKey,
        ...(log ? { log } : {}),
      });
      p.stop();
      if (args.json) console.log(JSON.stringify({ ok: true, digest: r.digest, dir: r.dir, publicKey: key.publicKey }));
      else console.log(r.digest);
    } catch (e) {
      p.stop();
      fail(e, args.json);
    }
  },
});

const publish = command({
  meta: {
    name: "publish",
    description: "Lay out image directories under BASE/<digest hex>/ for a static web server; print each digest",
  },
  args: {
    out: { type: "string", valueHint: "BASE", description: "Base directory a web server serves (created)" },
    json: { type: "boolean", description: "Print the result as JSON", default: false },
  },
  variadic: "DIR…",
  examples: [
    "bb image publish --out /srv/www .bb/images/myimg",
    "bb image publish --out /srv/www .bb/images/dev .bb/images/app --json",
  ],
  async run({ args }) {
    try {
      const dirs = (args._ as string[]).filter(Boolean);
      if (!args.out) throw usage("--out BASE is required");
      if (dirs.length === 0) throw usage("name at least one image directory");
      const { publishImages } = await import("../image/publish.ts");
      const published = await publishImages(dirs, args.out);
      if (args.json) console.log(JSON.stringify({ ok: true, published }));
      else for (const p of published) console.log(p.digest);
    } catch (e) {
      fail(e, args.json);
    }
  },
});

/** The `bb image` command group. */
export const imageCommand = command({
  meta: { name: "image", description: "Build, sign, verify and publish Beachball images" },
  examples: [
    "bb image dev-build",
    "bb image keygen --out op.key",
    "bb image build --oci-layout ./layout --key op.key --out .bb/images/myimg",
  ],
  subCommands: { "dev-build": devBuild, build, "reference-build": referenceBuild, keygen, sign, verify, publish },
});
