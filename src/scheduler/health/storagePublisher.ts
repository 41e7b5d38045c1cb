/**
 * What the main loop tells the health listener's Worker about storage
 * (./healthListener.ts): on a heartbeat, at most once per
 * STORAGE_PROBE_INTERVAL_MS, it reads storage health
 * (SchedulerWorker.health()) and posts it when it changed. The heartbeat
 * comes every LOOP_HEARTBEAT_INTERVAL_MS (50 ms); reading storage on every
 * beat would probe a faulted store twenty times a second, so the bound
 * holds whether the store is healthy or faulted.
 * Must never: post the same state twice in a row, or read storage more
 * than once per STORAGE_PROBE_INTERVAL_MS of the clock's monotonic time.
 */
import type { Clock } from "../../protocol/clock.ts";
import type { StorageState } from "./healthAnswer.ts";

/** Least time between two storage reads of the health listener, ms (monotonic). */
export const STORAGE_PROBE_INTERVAL_MS = 1_000;

/** The message the health Worker takes for storage health. */
export interface StorageMessage {
  type: "storage";
  ok: boolean;
  detail: string;
  code?: string;
}

/** Reads storage at most once per STORAGE_PROBE_INTERVAL_MS and posts each change (see the module header). */
export class StoragePublisher {
  private last = "";
  private probedAtMs: number | null = null;

  /** `probe` reads storage health; `post` sends a changed state to the Worker; `clock.monoMs` spaces the reads. */
  constructor(
    private readonly probe: () => StorageState,
    private readonly post: (m: StorageMessage) => void,
    private readonly clock: Clock,
  ) {}

  /** One heartbeat: probes if the last probe is STORAGE_PROBE_INTERVAL_MS old (or none ran yet). */
  onBeat(): void {
    const now = this.clock.monoMs();
    if (this.probedAtMs !== null && now - this.probedAtMs < STORAGE_PROBE_INTERVAL_MS) return;
    this.probedAtMs = now;
    const s = this.probe();
    const key = `${s.ok}|${s.code ?? ""}|${s.detail}`;
    if (key === this.last) return;
    this.last = key;
    this.post({ type: "storage", ok: s.ok, detail: s.detail, ...(s.code ? { code: s.code } : {}) });
  }
}
