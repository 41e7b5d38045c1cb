/**
 * A bound on a benchmark's run time (issue 18 "Done when": every benchmark
 * ends on its own): a benchmark calls limitRunTime() first; if it has not
 * finished when the bound passes, it says so on stderr, runs the cleanups it
 * registered (namespaces, child processes; each at most CLEANUP_MS) and
 * exits 1. A benchmark that finishes first is not held up (the timer is
 * unref'd). A helper of the benchmarks, not a benchmark: it measures nothing.
 *
 * Owns: the one timer and the cleanup list. Must never: keep a process alive.
 */

/** Environment variable that overrides every benchmark's bound, seconds. */
export const RUN_LIMIT_ENV = "BB_BENCH_MAX_SECONDS";
/** Longest one registered cleanup may take at the bound, ms. */
export const CLEANUP_MS = 15_000;

const cleanups: Array<() => unknown> = [];

/** Ends the process with exit code 1 after `seconds` (or $BB_BENCH_MAX_SECONDS), running the registered cleanups first. */
export function limitRunTime(name: string, seconds: number): void {
  const env = Number(process.env[RUN_LIMIT_ENV]);
  const limit = Number.isFinite(env) && env > 0 ? env : seconds;
  const t = setTimeout(async () => {
    console.error(
      `${name}: did not finish within ${limit} s (its run-time bound; ${RUN_LIMIT_ENV} overrides it); giving up`,
    );
    for (const fn of cleanups.reverse()) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        Promise.resolve()
          .then(fn)
          .catch(() => {}),
        new Promise((r) => (timer = setTimeout(r, CLEANUP_MS))),
      ]);
      clearTimeout(timer);
    }
    process.exit(1);
  }, limit * 1000);
  t.unref();
}

/** Registers a cleanup run (in reverse order) when the bound passes. */
export function onRunLimit(fn: () => unknown): void {
  cleanups.push(fn);
}
