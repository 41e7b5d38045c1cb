import { describe, expect, test } from "bun:test";
import { ConsoleRedactor, MAX_LINE_BYTES, NO_PAYLOAD, payloadDigests, REDACTED, redactLine } from "./redact.ts";

const NONCE = "f".repeat(64);
const enc = (s: string) => new TextEncoder().encode(s);

describe("redaction of pushed console output", () => {
  test("the nonce, a nonce argument and control characters (terminal escapes included) never pass", () => {
    const none = NO_PAYLOAD;
    expect(redactLine(`token ${NONCE} here`, [NONCE], none)).toBe(`token ${REDACTED} here`);
    expect(redactLine("cmdline beachball.bootstrap_nonce=abcdef0123 quiet", [], none)).toBe(
      `cmdline beachball.bootstrap_nonce=${REDACTED} quiet`,
    );
    expect(redactLine("\x1b[31mred\x1b[0m\tok\x07", [], none)).toBe("[31mred[0m\tok");
  });

  test("a line of the payload, bare or behind a shell trace prefix, is replaced whole; ordinary output of the payload is kept", () => {
    const payload = enc('export API_TOKEN=s3cr3t-value-0123456789\nfor i in 1 2 3; do echo "line $i"; done\necho hi\n');
    const d = payloadDigests(payload);
    expect(redactLine("export API_TOKEN=s3cr3t-value-0123456789", [], d)).toBe(REDACTED);
    expect(redactLine("+ export API_TOKEN=s3cr3t-value-0123456789", [], d)).toBe(REDACTED);
    expect(redactLine("  export API_TOKEN=s3cr3t-value-0123456789\r", [], d)).toBe(REDACTED);
    expect(redactLine("line 1", [], d)).toBe("line 1");
    // Short payload lines are not digested: "echo hi" printed by the workload stays.
    expect(redactLine("echo hi", [], d)).toBe("echo hi");
  });

  test("a secret-looking word of the payload is replaced wherever it appears; ordinary words of the payload are not", () => {
    const d = payloadDigests(
      enc(
        'TOKEN=ghp_0123456789abcdefABCDEF\ncurl -H "Authorization: Bearer sk-live-9f8e7d6c5b4a39281706" https://example.invalid/deployments\necho building-the-documentation\n',
      ),
    );
    expect(redactLine("token is ghp_0123456789abcdefABCDEF.", [], d)).toBe(`token is ${REDACTED}.`);
    expect(redactLine("token is ghp_0123456789abcdefABCDEF", [], d)).toBe(`token is ${REDACTED}`);
    expect(
      redactLine(
        "+ curl -H 'Authorization: Bearer sk-live-9f8e7d6c5b4a39281706' https://example.invalid/deployments",
        [],
        d,
      ),
    ).toBe(`+ curl -H 'Authorization: Bearer ${REDACTED}' https://example.invalid/deployments`);
    expect(redactLine('{"key":"ghp_0123456789abcdefABCDEF"}', [], d)).toBe(`{"key":"${REDACTED}"}`);
    // Long words without digits (ordinary output the script prints) stay.
    expect(redactLine("building-the-documentation", [], d)).toBe("building-the-documentation");
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

  test("a long line is cut between characters, never inside a UTF-8 sequence (no U+FFFD in valid output)", () => {
    const r = new ConsoleRedactor([]);
    const line = "a".repeat(MAX_LINE_BYTES - 1) + "é€".repeat(10) + "\n";
    const out = r.feed(enc(line));
    expect(out).not.toContain("\uFFFD");
    expect(out.replaceAll("\n", "")).toBe(line.slice(0, -1));
    expect(out.split("\n")[0]!.length).toBe(MAX_LINE_BYTES - 1);
  });

  test("payload digests are digests: the payload's bytes are not in them", () => {
    const d = payloadDigests(enc("export API_TOKEN=s3cr3t-value-0123456789\n"));
    const all = [...d.lines, ...d.words];
    expect(d.words.size).toBe(1);
    expect(all.join(" ")).not.toContain("s3cr3t");
    expect(all.every((x) => /^[0-9a-f]{64}$/.test(x))).toBe(true);
  });
});
