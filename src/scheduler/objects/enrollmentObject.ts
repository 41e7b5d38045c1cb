/**
 * Enrollment tokens (spec "Enrollment"): bound to one host ID, at most one
 * hour, stored as a digest only, usable once. A reuse with the same host
 * configuration replays the first answer's host ID; with another
 * configuration it is ENROLLMENT_CONFLICT.
 * Must never: store a raw token.
 */
import { AuthorityObject } from "../runtime/objectRuntime.ts";
import { BeachballError } from "../../protocol/errors.ts";

/** Longest token lifetime, ms. */
export const MAX_ENROLLMENT_TOKEN_TTL_MS = 3600_000;

/** See the module header. */
export class EnrollmentObject extends AuthorityObject {
  static readonly className = "Enrollment";

  constructor(ctx: ConstructorParameters<typeof AuthorityObject>[0]) {
    super(ctx);
    ctx.sql.exec(
      "CREATE TABLE IF NOT EXISTS tokens (token_digest TEXT PRIMARY KEY, host_id TEXT NOT NULL, expires_at_ms INTEGER NOT NULL, used_with TEXT, created_by TEXT NOT NULL)",
    );
  }

  /** Records a new token digest for `hostId`, valid `ttlMs` (capped at one hour). Returns the expiry. */
  mint(tokenDigest: string, hostId: string, ttlMs: number, createdBy: string): number {
    const expires = this.ctx.clock.now() + Math.min(ttlMs, MAX_ENROLLMENT_TOKEN_TTL_MS);
    this.ctx.sql.query("INSERT INTO tokens (token_digest, host_id, expires_at_ms, used_with, created_by) VALUES (?, ?, ?, NULL, ?)").run(tokenDigest, hostId, expires, createdBy);
    return expires;
  }

  /**
   * Consumes a token for an enrollment whose configuration digest is
   * `configDigest`. Returns the bound host ID and whether this is a replay.
   * Throws ENROLLMENT_TOKEN_INVALID (unknown or expired) or ENROLLMENT_CONFLICT.
   */
  consume(tokenDigest: string, configDigest: string): { hostId: string; replay: boolean } {
    const t = this.ctx.sql
      .query<{ host_id: string; expires_at_ms: number; used_with: string | null }, [string]>("SELECT host_id, expires_at_ms, used_with FROM tokens WHERE token_digest = ?")
      .get(tokenDigest);
    if (!t) throw new BeachballError("ENROLLMENT_TOKEN_INVALID", "unknown enrollment token");
    if (t.used_with !== null) {
      if (t.used_with !== configDigest) throw new BeachballError("ENROLLMENT_CONFLICT", "token already used with another host configuration");
      return { hostId: t.host_id, replay: true };
    }
    if (t.expires_at_ms <= this.ctx.clock.now()) throw new BeachballError("ENROLLMENT_TOKEN_INVALID", "enrollment token expired");
    this.ctx.sql.query("UPDATE tokens SET used_with = ? WHERE token_digest = ?").run(configDigest, tokenDigest);
    return { hostId: t.host_id, replay: false };
  }
}
