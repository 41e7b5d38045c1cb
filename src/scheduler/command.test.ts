/** `bb scheduler serve`'s address flags: `--listen` and `--health-listen` parse alike, and a malformed value names its flag (exit 2, usage). */
import { expect, test } from "bun:test";
import { parseListen } from "./command.ts";
import { UsageError } from "../command/run.ts";

test("parseListen splits HOST:PORT (IPv6 in brackets) and names the flag in its usage error", () => {
  expect(parseListen("127.0.0.1:7381", "--health-listen")).toEqual({ hostname: "127.0.0.1", port: 7381 });
  expect(parseListen("[::1]:0", "--health-listen")).toEqual({ hostname: "::1", port: 0 });
  expect(() => parseListen("nope", "--health-listen")).toThrow(UsageError);
  expect(() => parseListen("h:99999", "--health-listen")).toThrow('--health-listen must be HOST:PORT, got "h:99999"');
  expect(() => parseListen("x")).toThrow("--listen must be HOST:PORT");
});
