/**
 * Enrollment tokens (spec "Enrollment"): bound to one host ID, at most one
 * hour, stored as a digest only, usable once. A reuse with the same host
 * configuration replays the first answer's host ID; with another
 * configuration it is ENROLLMENT_CONFLICT.
 * Must never: store a raw token.
 */
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { SchedulerEnv } from "../env.ts";

/** Longest token lifetime, ms. */
export const MAX_ENROLLMENT_TOKEN_TTL_MS = 3600_000;

/** See the module header. */
export class EnrollmentObject extends AuthorityObject<SchedulerEnv, never> {
  static readonly className = "Enrollment";
  static readonly messageSchema = null;
  static readonly tables = ["enrollment_tokens"] as const;

  constructor(state: ObjectState<never>, env: SchedulerEnv) {
    super(state, env);
  }

  /** Records a new token digest for `hostId`, valid `ttlMs` (capped at one hour). Returns the expiry. */
  mint(tokenDigest: string, hostId: string, ttlMs: number, createdBy: string): number {
    const expires = this.env.clock.now() + Math.min(ttlMs, MAX_ENROLLMENT_TOKEN_TTL_MS);
    this.state.storage.sql.exec(
      "INSERT INTO enrollment_tokens (obj, token_digest, host_id, expires_at_ms, used_with, created_by) VALUES (?, ?, ?, ?, NULL, ?)",
      this.state.name,
      tokenDigest,
      hostId,
      expires,
      createdBy,
    );
    return expires;
  }

  /**
   * Consumes a token for an enrollment whose configuration digest is
   * `configDigest`. Returns the bound host ID and whether this is a replay.
   * Throws ENROLLMENT_TOKEN_INVALID (unknown or expired) or ENROLLMENT_CONFLICT.
   */
  consume(tokenDigest: string, configDigest: string): { hostId: string; replay: boolean } {
    const found = this.state.storage.sql
      .exec<{ host_id: string; expires_at_ms: number; used_with: string | null }>(
        "SELECT host_id, expires_at_ms, used_with FROM enrollment_tokens WHERE obj = ? AND token_digest = ?",
        this.state.name,
        tokenDigest,
      )
      .next();
    if (found.done) throw new BeachballError("ENROLLMENT_TOKEN_INVALID", "unknown enrollment token");
    const t = found.value;
    if (t.used_with !== null) {
      if (t.used_with !== configDigest)
        throw new BeachballError("ENROLLMENT_CONFLICT", "token already used with another host configuration");
      return { hostId: t.host_id, replay: true };
    }
    if (t.expires_at_ms <= this.env.clock.now())
      throw new BeachballError("ENROLLMENT_TOKEN_INVALID", "enrollment token expired");
    this.state.storage.sql.exec(
      "UPDATE enrollment_tokens SET used_with = ? WHERE obj = ? AND token_digest = ?",
      configDigest,
      this.state.name,
      tokenDigest,
    );
    return { hostId: t.host_id, replay: false };
  }
}
