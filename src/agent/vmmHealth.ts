/**
 * Whether this host's VMM can start VMs (issue "a VMM that cannot start
 * must make the host unhealthy"): VMM_START_FAILING is raised after
 * VMM_START_FAILURES_UNHEALTHY start attempts in a row failed with
 * VMM_START_FAILED, or when the VMM test boot failed; while raised, the
 * health report says so (the scheduler makes the host unschedulable and
 * alerts) and the test boot runs again every self-check interval. A passing
 * test boot or a VM that launches clears it.
 * Must never: clear the condition without a VMM having started something.
 */
import type { AgentLog } from "./ports.ts";
import type { Clock } from "../protocol/clock.ts";

/** Failed VMM starts in a row that mark the VMM failing. */
export const VMM_START_FAILURES_UNHEALTHY = 3;
/** Default time between self-checks while failing, ms. */
export const DEFAULT_VMM_SELF_CHECK_INTERVAL_MS = 60_000;

/** Result of one VMM self-check (the doctor's `vmm-boot` check). */
export interface VmmSelfCheck {
  status: "pass" | "warn" | "fail" | "skip";
  detail: string;
}

/** See the module header. */
export class VmmHealth {
  private consecutiveFailures = 0;
  private failingSince: number | null = null;
  private lastCheckMs = 0;
  private checking = false;

  constructor(
    private readonly deps: {
      clock: Clock;
      log: AgentLog;
      selfCheck: () => Promise<VmmSelfCheck>;
      intervalMs: number;
    },
  ) {}

  /** True while VMM starts are failing (reported as `vmmStartFailing`). */
  get failing(): boolean {
    return this.failingSince !== null;
  }

  /** One start attempt ended: `launched` false when it failed with VMM_START_FAILED. */
  noteStart(launched: boolean): void {
    if (launched) {
      this.consecutiveFailures = 0;
      this.clear("a VM launched");
      return;
    }
    this.consecutiveFailures++;
    if (this.consecutiveFailures >= VMM_START_FAILURES_UNHEALTHY)
      this.raise(`${this.consecutiveFailures} VMM starts in a row failed`);
  }

  /** A self-check finished (at startup, from the prerequisite registry, or a re-check). */
  noteSelfCheck(r: VmmSelfCheck): void {
    this.lastCheckMs = this.deps.clock.wallMs();
    if (r.status === "fail") this.raise(`VMM test boot failed: ${r.detail}`);
    else if (r.status === "pass") {
      this.consecutiveFailures = 0;
      this.clear(`VMM test boot passed: ${r.detail}`);
    }
  }

  /** While failing, runs the self-check once the interval has passed since the last one. */
  async recheckIfDue(): Promise<void> {
    if (!this.failing || this.checking || this.deps.clock.wallMs() - this.lastCheckMs < this.deps.intervalMs) return;
    this.checking = true;
    try {
      this.noteSelfCheck(await this.deps.selfCheck());
    } catch (e) {
      this.noteSelfCheck({ status: "fail", detail: (e as Error).message });
    } finally {
      this.checking = false;
    }
  }

  private raise(why: string): void {
    if (this.failingSince === null) {
      this.failingSince = this.deps.clock.wallMs();
      this.deps.log.warn(
        "VMM starts failing (VMM_START_FAILING); this host takes no new work until a VMM self-check passes",
        { code: "VMM_START_FAILING", reason: why },
      );
    }
  }

  private clear(why: string): void {
    if (this.failingSince === null) return;
    this.failingSince = null;
    this.deps.log.info("VMM start failing cleared", { reason: why });
  }
}
