/** The `beachball-grant` header value (controlGrant.ts): base64url without padding of the signed grant's canonical JSON. */
import { expect, test } from "bun:test";
import { canonicalJson } from "./canonical.ts";
import type { SignedGrant } from "./connection.ts";
import { controlGrantHeaderValue } from "./controlGrant.ts";

test("canonical JSON (keys sorted at every level), base64url, no padding, decodable back to the same document", () => {
  const doc = {
    payload: { ports: [7390], grantId: "grt_1", note: "ü/+?" },
    signature: "sig+/=",
    keyId: "conn-1",
  } as unknown as SignedGrant;
  const v = controlGrantHeaderValue(doc);
  expect(v).toMatch(/^[A-Za-z0-9_-]+$/);
  const text = Buffer.from(v, "base64url").toString("utf8");
  expect(text).toBe(canonicalJson(doc));
  expect(text.startsWith('{"keyId":"conn-1","payload":{"grantId":"grt_1","note":"ü/+?","ports":[7390]}')).toBe(true);
  expect(JSON.parse(text)).toEqual(doc);
});
