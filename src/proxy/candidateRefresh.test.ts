/** The proxy's candidate refresh on a fake clock: posts at start, every 20 s while no direct path, only changes, bounded, retried under a new sequence number. */
import { expect, test } from "bun:test";
import type { Candidate } from "../protocol/connection.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import { CANDIDATE_REFRESH_MS } from "../wireguard/index.ts";
import { CandidateRefresh, MAX_CANDIDATE_POSTS } from "./candidateRefresh.ts";

const local: Candidate = { address: "10.1.0.2", port: 40_000, kind: "local" };
const stun = (port: number): Candidate => ({ address: "198.51.100.10", port, kind: "stun" });

function harness() {
  const w = {
    clock: new FakeClock({ monoMs: 1_000 }),
    direct: false,
    list: [stun(61_000), local] as Candidate[],
    gathers: 0,
    fail: false,
    posts: [] as Array<{ seq: number; candidates: Candidate[] }>,
    logs: [] as string[],
  };
  const r = new CandidateRefresh({
    gather: async () => (w.gathers++, w.list),
    post: async (seq, candidates) => {
      if (w.fail) throw new Error("scheduler unreachable");
      w.posts.push({ seq, candidates });
    },
    directConfirmed: () => w.direct,
    clock: w.clock,
    log: (l) => w.logs.push(l),
  });
  /** Moves the fake clock by `ms`, ticks, and lets the refresh it started finish. */
  const advance = async (ms: number) => {
    w.clock.advance(ms);
    r.tick();
    await r.settled();
  };
  return { w, r, advance };
}

test("posted at start (STUN first), then gathered every 20 s while no direct path; an unchanged list is not posted again; a new mapping is, under the next sequence number", async () => {
  const { w, r, advance } = harness();
  await r.refresh();
  expect(w.posts).toEqual([{ seq: 1, candidates: [stun(61_000), local] }]);
  expect(w.logs).toEqual(["posted 2 candidates to the rendezvous (1 from STUN)"]);
  expect(r.deadlineMs()).toBe(1_000 + CANDIDATE_REFRESH_MS);
  // Before the period nothing happens.
  w.clock.advance(CANDIDATE_REFRESH_MS - 1);
  r.tick();
  expect(w.gathers).toBe(1);
  await advance(1);
  expect(w.gathers).toBe(2);
  expect(w.posts).toHaveLength(1);
  // The NAT rebinds: the STUN answer changes and is posted as message 2.
  w.list = [stun(61_500), local];
  await advance(CANDIDATE_REFRESH_MS);
  expect(w.posts.at(-1)).toEqual({ seq: 2, candidates: [stun(61_500), local] });
});

test("no gathering while a direct path is confirmed; it resumes when the path is lost", async () => {
  const { w, r, advance } = harness();
  await r.refresh();
  w.direct = true;
  w.list = [stun(62_000), local];
  await advance(CANDIDATE_REFRESH_MS);
  await advance(CANDIDATE_REFRESH_MS);
  expect(w.gathers).toBe(1);
  // The deadline keeps moving (the alarm never spins on a past deadline).
  expect(r.deadlineMs()).toBe(w.clock.monoMs() + CANDIDATE_REFRESH_MS);
  w.direct = false;
  await advance(CANDIDATE_REFRESH_MS);
  expect(w.posts.map((p) => p.seq)).toEqual([1, 2]);
});

test("an empty first list is not posted; a failed post is retried at the next refresh under a new sequence number", async () => {
  const { w, r, advance } = harness();
  w.list = [];
  await r.refresh();
  expect(w.posts).toEqual([]);
  w.list = [local];
  w.fail = true;
  await advance(CANDIDATE_REFRESH_MS);
  expect(w.logs.at(-1)).toContain("could not post candidates to the rendezvous (scheduler unreachable)");
  w.fail = false;
  await advance(CANDIDATE_REFRESH_MS);
  expect(w.posts).toEqual([{ seq: 2, candidates: [local] }]);
});

test("at most MAX_CANDIDATE_POSTS lists per run, logged once; one gathering at a time; nothing after close()", async () => {
  const { w, r, advance } = harness();
  for (let i = 0; i < MAX_CANDIDATE_POSTS + 5; i++) {
    w.list = [stun(50_000 + i), local];
    await advance(CANDIDATE_REFRESH_MS);
  }
  expect(w.posts).toHaveLength(MAX_CANDIDATE_POSTS);
  expect(r.posts).toBe(MAX_CANDIDATE_POSTS);
  expect(w.logs.filter((l) => l.includes("not posting more"))).toHaveLength(1);
  const before = w.gathers;
  const a = r.refresh();
  const b = r.refresh();
  expect(a).toBe(b);
  await a;
  expect(w.gathers).toBe(before + 1);
  r.close();
  expect(r.deadlineMs()).toBeNull();
  await advance(CANDIDATE_REFRESH_MS);
  expect(w.gathers).toBe(before + 1);
});
