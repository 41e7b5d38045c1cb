/**
 * The value of the `beachball-grant` header (CONTROL_GRANT_HEADER,
 * src/protocol/control.ts; issue 20 "Exec and files"): the client's whole
 * signed connection grant as canonical JSON (src/protocol/canonical.ts),
 * base64url without padding. The guest's control service decodes it and
 * verifies it exactly as src/protocol/connectionSignature.ts verifies grants.
 *
 * Owns: that one encoding, so every client (`bb exec`, `bb cp`, the typed
 * client) sends the same bytes. Pure. Must never: carry anything but the
 * signed grant (no token, no key: the grant is signed, not secret).
 */
import { canonicalJson } from "./canonical.ts";
import type { SignedGrant } from "./connection.ts";

/** The `beachball-grant` header value of `signed`: base64url (no padding) of its canonical JSON. */
export function controlGrantHeaderValue(signed: SignedGrant): string {
  return Buffer.from(canonicalJson(signed), "utf8").toString("base64url");
}
