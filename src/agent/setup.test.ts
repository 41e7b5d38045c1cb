/**
 * `bb agent setup` without a terminal: a scripted Prompter stands in for
 * @clack/prompts. Flags win and are not asked again; without a prompter a
 * missing or malformed value is a usage error naming its flag; join.json
 * is written 0600 and read back checked.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UsageError } from "../command/run.ts";
import {
  collectJoinSettings,
  joinFilePath,
  MAX_SETUP_PLACEMENTS,
  readJoinSettings,
  removeJoinSettings,
  writeJoinSettings,
  type Prompter,
} from "./setup.ts";

const dir = mkdtempSync(join(tmpdir(), "bb-agent-setup-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A Prompter answering from `answers` in order, recording each question and running its validator on the answer. */
function scripted(answers: (string | boolean)[]) {
  const asked: string[] = [];
  const rejected: string[] = [];
  const next = (message: string, validate?: (v: string) => string | undefined) => {
    asked.push(message);
    const a = answers.shift();
    if (a === undefined) throw new Error(`no scripted answer for "${message}"`);
    if (typeof a === "string" && validate) {
      const why = validate(a);
      if (why) rejected.push(why);
    }
    return a;
  };
  const p: Prompter = {
    text: async (q) => {
      const a = next(q.message, q.validate) as string;
      return a === "" ? (q.defaultValue ?? "") : a;
    },
    password: async (q) => next(q.message, q.validate) as string,
    confirm: async (q) => next(q.message) as boolean,
  };
  return { p, asked, rejected };
}

async function usage(fn: () => Promise<unknown>): Promise<string> {
  try {
    await fn();
  } catch (e) {
    expect(e).toBeInstanceOf(UsageError);
    return (e as Error).message;
  }
  throw new Error("expected a UsageError");
}

describe("collectJoinSettings", () => {
  test("flags alone, no prompter: defaults for what is optional", async () => {
    expect(await collectJoinSettings({ scheduler: "http://10.0.0.1:7380/", token: " bbe_x " }, null)).toEqual({
      schedulerUrl: "http://10.0.0.1:7380",
      token: "bbe_x",
      imageDirs: [".bb/images/dev"],
    });
  });

  test("without a prompter, a missing or malformed value names its flag", async () => {
    expect(await usage(() => collectJoinSettings({ token: "t" }, null))).toStartWith("missing --scheduler");
    expect(await usage(() => collectJoinSettings({ scheduler: "http://h:1" }, null))).toStartWith("missing --token");
    expect(await usage(() => collectJoinSettings({ scheduler: "h:1", token: "t" }, null))).toContain(
      '--scheduler "h:1" is not an http:// or https:// URL',
    );
    expect(
      await usage(() => collectJoinSettings({ scheduler: "http://h:1", token: "t", maxPlacements: "0" }, null)),
    ).toBe(`--max-placements must be a whole number from 1 to ${MAX_SETUP_PLACEMENTS} (got 0)`);
  });

  test("asks only for what the flags left out, with validators that name the fault", async () => {
    const s = scripted(["not a url", "  bbe_secret ", "http://images.example/", "", "op.key.pub, other.pub", "0"]);
    // The scripted prompter returns the first answer even when its validator refuses it, so the bad URL still reaches the final check.
    expect(await usage(() => collectJoinSettings({ maxPlacements: undefined }, s.p))).toContain(
      '--scheduler "not a url"',
    );
    expect(s.rejected[0]).toContain("is not an http:// or https:// URL");

    const ok = scripted([
      "http://10.0.0.1:7380",
      "bbe_secret",
      "http://images.example/",
      "",
      "op.key.pub, other.pub",
      "16",
    ]);
    expect(await collectJoinSettings({}, ok.p)).toEqual({
      schedulerUrl: "http://10.0.0.1:7380",
      token: "bbe_secret",
      imageDirs: [".bb/images/dev"],
      imageSource: "http://images.example/",
      trustedImageKeys: ["op.key.pub", "other.pub"],
      maxPlacements: 16,
    });
    expect(ok.asked).toHaveLength(6);
    expect(ok.rejected).toEqual([]);

    const some = scripted(["", ""]);
    expect(await collectJoinSettings({ scheduler: "http://h:1", token: "t", imageDirs: ["/img"] }, some.p)).toEqual({
      schedulerUrl: "http://h:1",
      token: "t",
      imageDirs: ["/img"],
      maxPlacements: 8,
    });
    // No image source: trusted keys are not asked; an empty answer takes the default VM count shown.
    expect(some.asked.map((q) => q.split(" (")[0])).toEqual(["Image source", "Most VMs at once"]);
  });
});

describe("join.json", () => {
  test("written 0600 in a 0700 directory, read back, removed", () => {
    const d = join(dir, "data");
    const path = writeJoinSettings(d, {
      schedulerUrl: "http://h:1",
      token: "bbe_t",
      imageDirs: ["/img"],
      maxPlacements: 4,
    });
    expect(path).toBe(joinFilePath(d));
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(d).mode & 0o777).toBe(0o700);
    expect(readJoinSettings(d)).toEqual({
      schedulerUrl: "http://h:1",
      token: "bbe_t",
      imageDirs: ["/img"],
      maxPlacements: 4,
    });
    removeJoinSettings(d);
    expect(readJoinSettings(d)).toBeNull();
  });

  test("a malformed or foreign join.json is a usage error naming it", async () => {
    const d = join(dir, "bad");
    writeJoinSettings(d, { schedulerUrl: "http://h:1", token: "t", imageDirs: [] });
    writeFileSync(joinFilePath(d), "{");
    expect(await usage(async () => readJoinSettings(d))).toStartWith(`${joinFilePath(d)} is not valid JSON`);
    writeFileSync(joinFilePath(d), JSON.stringify({ schedulerUrl: "http://h:1", token: "t", imageDirs: [], extra: 1 }));
    expect(await usage(async () => readJoinSettings(d))).toStartWith(`${joinFilePath(d)}: /extra`);
  });
});
