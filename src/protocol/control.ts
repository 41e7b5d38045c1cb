/**
 * The guest's control service (issue 20, "Exec and files"): the TCP port it
 * listens on at the allocation's private address, the header a client
 * presents its signed connection grant in, and the host→guest message that
 * tells the guest which connection verification keys to trust.
 *
 * Owns: those three names, defined once for the agent, the client and the
 * guest binary (guest/, Go), whose contract test checks its messages against
 * these schemas. Implements the spec's rule that VM traffic never passes
 * through the scheduler: exec and files ride the private network, admitted
 * by the host's inner filter and checked again by the guest. Must never:
 * carry a secret (verification keys are public).
 */
import { type Static, Type } from "@sinclair/typebox";

/** TCP port of the guest's control service at the allocation's private IPv6 address. */
export const GUEST_CONTROL_PORT = 7390;

/** Request header carrying the client's signed connection grant (canonical JSON, base64url without padding). */
export const CONTROL_GRANT_HEADER = "beachball-grant";

/** Most connection verification keys the agent hands the guest (a deployment rotates one or two at a time). */
export const MAX_CONTROL_VERIFICATION_KEYS = 8;

/**
 * Host → guest: the connection verification keys (key ID → base64 raw
 * 32-byte Ed25519 public key) the guest checks a presented grant against.
 * Sent by the agent after it accepts `guest_ready`, and again whenever it
 * adopts a running VM; the newest message replaces the keys before it.
 */
export const ControlConfigMessage = Type.Object(
  {
    type: Type.Literal("control_config"),
    verificationKeys: Type.Record(
      Type.String({ minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9._:-]+$" }),
      Type.String({ minLength: 43, maxLength: 44 }),
      { maxProperties: MAX_CONTROL_VERIFICATION_KEYS },
    ),
  },
  { additionalProperties: false },
);
/** Host → guest: the connection verification keys. */
export type ControlConfigMessage = Static<typeof ControlConfigMessage>;
