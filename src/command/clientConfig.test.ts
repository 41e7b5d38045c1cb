/**
 * Client configuration with real files in a temporary directory: the order
 * flags, environment, config file; every fault names the file, variable or
 * flag at fault and is a usage error (exit 2) without a pointer to --help.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UsageError } from "./run.ts";
import { configFileCandidates, MAX_CLIENT_CONFIG_BYTES, resolveClientConfig } from "./clientConfig.ts";

const dir = mkdtempSync(join(tmpdir(), "bb-cli-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

/** The UsageError `fn` throws (fails the test when it throws nothing or something else). */
function usageError(fn: () => unknown): UsageError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(UsageError);
    expect((e as UsageError).helpHint).toBe(false);
    return e as UsageError;
  }
  throw new Error("expected a UsageError");
}

describe("resolveClientConfig", () => {
  const cfg = file(
    "client.json",
    JSON.stringify({ schedulerUrl: "http://10.0.0.1:7380/", token: "file-token", operatorToken: "op" }),
  );

  test("flags win over the environment, the environment over the file; each URL keeps its origin", () => {
    expect(
      resolveClientConfig({ scheduler: "http://a:1", token: "t" }, { BB_SCHEDULER_URL: "http://b:2", BB_TOKEN: "e" }, [
        cfg,
      ]),
    ).toEqual({
      schedulerUrl: "http://a:1",
      token: "t",
      operatorToken: "op",
      urlOrigin: "--scheduler",
      file: cfg,
    });
    expect(resolveClientConfig({}, { BB_SCHEDULER_URL: "http://b:2" }, [cfg])).toMatchObject({
      schedulerUrl: "http://b:2",
      token: "file-token",
      urlOrigin: "BB_SCHEDULER_URL",
    });
    expect(resolveClientConfig({}, {}, [join(dir, "absent.json"), cfg])).toMatchObject({
      schedulerUrl: "http://10.0.0.1:7380",
      urlOrigin: `schedulerUrl in ${cfg}`,
    });
  });

  test("BB_CONFIG alone is read when set, and must exist", () => {
    expect(configFileCandidates({ BB_CONFIG: cfg }, "/w", "/h")).toEqual([cfg]);
    expect(configFileCandidates({}, "/w", "/h")).toEqual(["/w/.bb/client.json", "/h/.config/beachball/client.json"]);
    const missing = join(dir, "missing.json");
    expect(usageError(() => resolveClientConfig({}, { BB_CONFIG: missing })).message).toBe(
      `BB_CONFIG names ${missing}, which does not exist`,
    );
  });

  test("a malformed file, an unknown field, a wrong type or an oversized file is refused naming the file", () => {
    const bad = file("bad.json", "{");
    expect(usageError(() => resolveClientConfig({}, {}, [bad])).message).toStartWith(
      `config file ${bad} is not valid JSON`,
    );
    const typo = file("typo.json", JSON.stringify({ schedulerUrl: "http://a:1", tokne: "x" }));
    expect(usageError(() => resolveClientConfig({}, {}, [typo])).message).toStartWith(`config file ${typo}: /tokne`);
    const wrong = file("wrong.json", JSON.stringify({ schedulerUrl: 7380 }));
    expect(usageError(() => resolveClientConfig({}, {}, [wrong])).message).toStartWith(
      `config file ${wrong}: /schedulerUrl`,
    );
    const big = file("big.json", JSON.stringify({ token: "x".repeat(MAX_CLIENT_CONFIG_BYTES) }));
    expect(usageError(() => resolveClientConfig({}, {}, [big])).message).toContain(
      `config file ${big} is ${MAX_CLIENT_CONFIG_BYTES + 12} bytes; a client config is at most ${MAX_CLIENT_CONFIG_BYTES} bytes`,
    );
    const folder = join(dir, "folder.json");
    mkdirSync(folder);
    expect(usageError(() => resolveClientConfig({}, {}, [folder])).message).toBe(
      `cannot read config file ${folder}: EISDIR`,
    );
  });

  test("a malformed URL is refused naming where it came from", () => {
    expect(
      usageError(() => resolveClientConfig({}, { BB_SCHEDULER_URL: "127.0.0.1:7380", BB_TOKEN: "t" }, [])).message,
    ).toBe(
      'scheduler URL "127.0.0.1:7380" (from BB_SCHEDULER_URL) is not an http:// or https:// URL such as http://127.0.0.1:7380',
    );
    const ftp = file("ftp.json", JSON.stringify({ schedulerUrl: "ftp://h/", token: "t" }));
    expect(usageError(() => resolveClientConfig({}, {}, [ftp])).message).toContain(`(from schedulerUrl in ${ftp})`);
    const withToken = file("cred.json", JSON.stringify({ schedulerUrl: "http://user:pw@h:1", token: "t" }));
    expect(() => resolveClientConfig({}, {}, [withToken])).toThrow(UsageError);
  });

  test("a missing URL or token says which, and where it looked", () => {
    const a = join(dir, "none-a.json");
    const m = usageError(() => resolveClientConfig({}, {}, [a])).message;
    expect(m).toStartWith("no scheduler URL and token: ");
    expect(m).toEndWith(`read: no config file (looked for ${a})`);
    const onlyUrl = file("url-only.json", JSON.stringify({ schedulerUrl: "http://a:1" }));
    expect(usageError(() => resolveClientConfig({}, {}, [onlyUrl])).message).toMatch(
      new RegExp(`^no token: .*read: config file ${onlyUrl}$`),
    );
  });
});
