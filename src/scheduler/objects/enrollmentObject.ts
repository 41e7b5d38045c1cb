/**
 * Enrollment tokens (spec "Enrollment"): bound to one host ID, at most one
 * hour, stored as a digest only, usable once. A reuse with the same host
 * configuration replays the first answer's host ID; with another
 * configuration it is ENROLLMENT_CONFLICT.
 * Must never: store a raw token.
 */
import { and, eq, sql } from "drizzle-orm";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { param, placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { SchedulerEnv } from "../env.ts";
import { enrollmentTokenTable } from "./singletonSchema.ts";

/** Longest token lifetime, ms. */
export const MAX_ENROLLMENT_TOKEN_TTL_MS = 3600_000;

const queries = (db: ObjectDb) => {
  const t = enrollmentTokenTable;
  const token = and(eq(t.obj, sql.placeholder("obj")), eq(t.tokenDigest, sql.placeholder("tokenDigest")));
  return {
    insert: db
      .insert(t)
      .values({
        ...placeholders("obj", "tokenDigest", "hostId", "expiresAtMs", "createdBy"),
        usedWith: null,
      })
      .prepare(),
    token: db.select().from(t).where(token).prepare(),
    use: db
      .update(t)
      .set({ usedWith: param<string>("configDigest") })
      .where(token)
      .prepare(),
  };
};

/** See the module header. */
export class EnrollmentObject extends AuthorityObject<SchedulerEnv, never> {
  static readonly className = "Enrollment";
  static readonly messageSchema = null;
  static readonly tables = ["enrollment_tokens"] as const;

  private readonly q = prepared(this.state.storage, queries);

  constructor(state: ObjectState<never>, env: SchedulerEnv) {
    super(state, env);
  }

  /** Records a new token digest for `hostId`, valid `ttlMs` (capped at one hour). Returns the expiry. */
  mint(tokenDigest: string, hostId: string, ttlMs: number, createdBy: string): number {
    const expires = this.env.clock.wallMs() + Math.min(ttlMs, MAX_ENROLLMENT_TOKEN_TTL_MS);
    this.q.insert.run({ obj: this.state.name, tokenDigest, hostId, expiresAtMs: expires, createdBy });
    return expires;
  }

  /**
   * Consumes a token for an enrollment whose configuration digest is
   * `configDigest`. Returns the bound host ID and whether this is a replay.
   * Throws ENROLLMENT_TOKEN_INVALID (unknown or expired) or ENROLLMENT_CONFLICT.
   */
  consume(tokenDigest: string, configDigest: string): { hostId: string; replay: boolean } {
    const t = this.q.token.get({ obj: this.state.name, tokenDigest });
    if (!t) throw new BeachballError("ENROLLMENT_TOKEN_INVALID", "unknown enrollment token");
    if (t.usedWith !== null) {
      if (t.usedWith !== configDigest)
        throw new BeachballError("ENROLLMENT_CONFLICT", "token already used with another host configuration");
      return { hostId: t.hostId, replay: true };
    }
    if (t.expiresAtMs <= this.env.clock.wallMs())
      throw new BeachballError("ENROLLMENT_TOKEN_INVALID", "enrollment token expired");
    this.q.use.run({ obj: this.state.name, tokenDigest, configDigest });
    return { hostId: t.hostId, replay: false };
  }
}
