import { describe, expect, test } from "bun:test";
import { ConsoleRedactor, MAX_LINE_BYTES, payloadLineDigests, REDACTED, redactLine } from "./redact.ts";

const NONCE = "f".repeat(64);
const enc = (s: string) => new TextEncoder().encode(s);

describe("redaction of pushed console output", () => {
  test("the nonce, a nonce argument and control characters (terminal escapes included) never pass", () => {
    const none = new Set<string>();
    expect(redactLine(`token ${NONCE} here`, [NONCE], none)).toBe(`token ${REDACTED} here`);
    expect(redactLine("cmdline beachball.bootstrap_nonce=abcdef0123 quiet", [], none)).toBe(`cmdline beachball.bootstrap_nonce=${REDACTED} quiet`);
    expect(redactLine("\x1b[31mred\x1b[0m\tok\x07", [], none)).toBe("[31mred[0m\tok");
  });

  test("a line of the payload, bare or behind a shell trace prefix, is replaced whole; ordinary output of the payload is kept", () => {
    const payload = enc("export API_TOKEN=s3cr3t-value-0123456789\nfor i in 1 2 3; do echo \"line $i\"; done\necho hi\n");
    const d = payloadLineDigests(payload);
    expect(redactLine("export API_TOKEN=s3cr3t-value-0123456789", [], d)).toBe(REDACTED);
    expect(redactLine("+ export API_TOKEN=s3cr3t-value-0123456789", [], d)).toBe(REDACTED);
    expect(redactLine("  export API_TOKEN=s3cr3t-value-0123456789\r", [], d)).toBe(REDACTED);
    expect(redactLine("line 1", [], d)).toBe("line 1");
    // Short payload lines are not digested: "echo hi" printed by the workload stays.
    expect(redactLine("echo hi", [], d)).toBe("echo hi");
  });

  test("lines are whole across reads: a secret split between two reads is still caught, a partial line waits", () => {
    const r = new ConsoleRedactor([NONCE]);
    expect(r.feed(enc(`first\nsecret ${NONCE.slice(0, 30)}`))).toBe("first\n");
    expect(r.feed(enc(`${NONCE.slice(30)} end\r\nnext`))).toBe(`secret ${REDACTED} end\n`);
    expect(r.feed(enc("\n"))).toBe("next\n");
  });

  test("a line without a newline is cut at MAX_LINE_BYTES, so what is held stays bounded", () => {
    const r = new ConsoleRedactor([]);
    const out = r.feed(enc("y".repeat(MAX_LINE_BYTES * 2 + 10)));
    expect(out).toBe(`${"y".repeat(MAX_LINE_BYTES)}\n${"y".repeat(MAX_LINE_BYTES)}\n`);
    expect(r.feed(enc("\n"))).toBe(`${"y".repeat(10)}\n`);
  });

  test("payload digests are digests: the payload's bytes are not in them", () => {
    const d = payloadLineDigests(enc("export API_TOKEN=s3cr3t-value-0123456789\n"));
    expect([...d].join(" ")).not.toContain("s3cr3t");
    expect([...d].every((x) => /^[0-9a-f]{64}$/.test(x))).toBe(true);
  });
});
