import { expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { bytesToBase64 } from "./base64.ts";

test("bytesToBase64 matches Buffer's base64 across piece boundaries and for empty input", () => {
  for (const n of [0, 1, 2, 3, 24_575, 24_576, 24_577, 100_000]) {
    const b = new Uint8Array(randomBytes(n));
    expect(bytesToBase64(b)).toBe(Buffer.from(b).toString("base64"));
  }
});
