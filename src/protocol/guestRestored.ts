/**
 * The host→guest `restored` message (issue 21, "Suspend / resume": the
 * guest re-proves its identity after every restore, re-seeds its entropy
 * and fixes its clock). A VM restored from a snapshot wakes with the memory
 * of the VM that was suspended: its identity, nonce, kernel random state and
 * clock are the old ones. The agent sends this message on the control
 * channel of a restored VM before anything else; the guest (guest/internal/
 * restore) adds the entropy to the kernel's pool, steps CLOCK_REALTIME,
 * adopts the identity (its later guest_ready and its control service's
 * grant checks use it) and answers with a fresh guest_ready (a new bootId).
 *
 * Owns: the message's shape and bounds, defined once for the agent and the
 * Go guest (test/guest-contract.test.ts checks one against the other).
 * Must never: carry a payload or any secret but the new nonce.
 */
import { type Static, Type } from "@sinclair/typebox";
import { MAX_IPV6_TEXT } from "./agent.ts";
import { MAX_WIRE_INTEGER } from "./api.ts";

/** Fewest bytes of entropy a `restored` message carries (256 bits: a full reseed of the kernel's CRNG). */
export const MIN_RESTORE_ENTROPY_BYTES = 32;
/** Most bytes of entropy a `restored` message carries (4096 bits: the input pool of kernels before 5.18). */
export const MAX_RESTORE_ENTROPY_BYTES = 512;
/** Earliest wall clock a `restored` message may step the guest to, ms since the epoch (2020-01-01T00:00:00Z: a host clock before it is wrong). */
export const MIN_RESTORE_WALL_CLOCK_MS = 1_577_836_800_000;
/** Latest wall clock a `restored` message may step the guest to, ms since the epoch (9999-12-31T23:59:59.999Z, the last four-digit year). */
export const MAX_RESTORE_WALL_CLOCK_MS = 253_402_300_799_999;
/** Longest allocation or placement ID a `restored` message carries, characters (the agent protocol's IDs, src/protocol/agent.ts). */
export const MAX_GUEST_ID_CHARS = 160;
/** The characters of an allocation or placement ID on the kernel command line and in `restored` (no space, `=` or quote). */
export const GUEST_ID_PATTERN = "^[A-Za-z0-9._:-]+$";
/** A bootstrap nonce: 256 random bits as 64 lower-case hex digits (src/agent/placementOps.ts makes them). */
export const GUEST_NONCE_PATTERN = "^[0-9a-f]{64}$";

/** Characters of the padded base64 of `bytes` bytes. Pure. */
export function base64Chars(bytes: number): number {
  return Math.ceil(bytes / 3) * 4;
}

/** `=` characters that pad the base64 of `bytes` bytes (0, 1 or 2). */
const padOf = (bytes: number) => (3 - (bytes % 3)) % 3;

/**
 * A pattern for padded standard base64 of `minBytes`..`maxBytes` bytes, exact
 * to the byte: with minLength/maxLength of base64Chars, the shortest text may
 * not carry more padding than `minBytes` gives (31 bytes are 44 characters
 * too) and the longest not less than `maxBytes` gives. Pure.
 */
export function base64BytesPattern(minBytes: number, maxBytes: number): string {
  const lo = base64Chars(minBytes);
  const hi = base64Chars(maxBytes);
  let ahead = "";
  if (padOf(minBytes) === 0) ahead += `(?!.{${lo - 1}}=$)`;
  else if (padOf(minBytes) === 1) ahead += `(?!.{${lo - 2}}==$)`;
  if (padOf(maxBytes) >= 1) ahead += `(?!.{${hi - 1}}[^=]$)`;
  if (padOf(maxBytes) === 2) ahead += `(?!.{${hi - 2}}[^=]=$)`;
  return `^${ahead}(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`;
}

const OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
/** An IPv4 dotted quad without leading zeros. */
export const IPV4_PATTERN = `^${OCTET}(?:\\.${OCTET}){3}$`;
/** An IPv4 address with its prefix length, as `beachball.ipv4=` carries it (`10.0.0.2/30`). */
export const IPV4_CIDR_PATTERN = `^${OCTET}(?:\\.${OCTET}){3}/(?:3[0-2]|[12]?[0-9])$`;

/**
 * The restored VM's network on its new placement: the same inputs as the
 * kernel arguments of a cold boot (src/image/guestNetInit.ts,
 * src/image/guestIpv6Init.ts). `ipv4Cidr` is `beachball.ipv4` (eth0's
 * address and prefix), `ipv4Gateway` `beachball.gateway` (the default
 * route; only with `ipv4Cidr`), `ipv6Address` `beachball.ipv6` (configured
 * as a /128 with `default via fe80::1`, GUEST_IPV6_ROUTER). An absent field
 * leaves that part of the guest's network as it was. The resolvers are host
 * policy and stay as they were.
 */
export const RestoredNetwork = Type.Object(
  {
    ipv4Cidr: Type.Optional(Type.String({ maxLength: 18, pattern: IPV4_CIDR_PATTERN })),
    ipv4Gateway: Type.Optional(Type.String({ maxLength: 15, pattern: IPV4_PATTERN })),
    ipv6Address: Type.Optional(Type.String({ minLength: 2, maxLength: MAX_IPV6_TEXT, pattern: "^[0-9a-f:]+$" })),
  },
  { additionalProperties: false },
);
/** The restored VM's network on its new placement. */
export type RestoredNetwork = Static<typeof RestoredNetwork>;

/**
 * Host → guest, first on the control channel of a restored VM: the new
 * identity (allocationId, placementId, generation, a fresh nonce; the field
 * rules of the kernel-argument identity), `entropyBase64` (padded base64 of
 * MIN_RESTORE_ENTROPY_BYTES..MAX_RESTORE_ENTROPY_BYTES random bytes; the
 * schema bounds its characters, the guest its decoded bytes),
 * `wallClockMs` (the host's wall clock when it sent the message),
 * `payloadAllowed` (the fork flag: a guest that consumed a payload before
 * the restore accepts another only with it) and `network` (RestoredNetwork).
 * For one allocation the generation never goes back: the guest ignores a
 * message with a lower generation than its own, and answers a repeat (the
 * same identity and nonce) with the same guest_ready and nothing else.
 */
export const RestoredMessage = Type.Object(
  {
    type: Type.Literal("restored"),
    allocationId: Type.String({ minLength: 1, maxLength: MAX_GUEST_ID_CHARS, pattern: GUEST_ID_PATTERN }),
    placementId: Type.String({ minLength: 1, maxLength: MAX_GUEST_ID_CHARS, pattern: GUEST_ID_PATTERN }),
    generation: Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER }),
    nonce: Type.String({ pattern: GUEST_NONCE_PATTERN }),
    entropyBase64: Type.String({
      minLength: base64Chars(MIN_RESTORE_ENTROPY_BYTES),
      maxLength: base64Chars(MAX_RESTORE_ENTROPY_BYTES),
      pattern: base64BytesPattern(MIN_RESTORE_ENTROPY_BYTES, MAX_RESTORE_ENTROPY_BYTES),
    }),
    wallClockMs: Type.Integer({ minimum: MIN_RESTORE_WALL_CLOCK_MS, maximum: MAX_RESTORE_WALL_CLOCK_MS }),
    payloadAllowed: Type.Optional(Type.Boolean()),
    network: Type.Optional(RestoredNetwork),
  },
  { additionalProperties: false },
);
/** Host → guest, first on the control channel of a restored VM. */
export type RestoredMessage = Static<typeof RestoredMessage>;
