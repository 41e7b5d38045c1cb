/**
 * Userspace link impairment for tests where the kernel has no `tc netem`
 * (CONFIG_NET_SCH_NETEM is off on this machine's kernel): seeded loss, a fixed
 * delay, and reordering the way netem's "reorder P%" does it (P% of packets
 * skip the delay and overtake the delayed ones). Used on the packet path
 * between a TUN device and the userspace stack. One timer for the whole queue.
 */

/** Impairment settings; percentages 0..100, delay in ms. */
export interface ImpairmentOptions {
  lossPercent: number;
  delayMs: number;
  /** Share of packets sent at once instead of delayed (netem "reorder"). */
  reorderPercent: number;
  seed: number;
}

/** Counters of what the impairment did. */
export interface ImpairmentStats {
  passed: number;
  dropped: number;
  reordered: number;
}

/** Wraps a packet sink with loss, delay and reordering. */
export class Impairment {
  readonly stats: ImpairmentStats = { passed: 0, dropped: 0, reordered: 0 };
  private x: number;
  private readonly queue: { at: number; packet: Uint8Array }[] = [];
  private head = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly opts: ImpairmentOptions,
    private readonly deliver: (packet: Uint8Array) => void,
  ) {
    this.x = opts.seed >>> 0 || 1;
  }

  /** A uniform number in [0, 100) from the seeded xorshift32. */
  private roll(): number {
    this.x ^= this.x << 13;
    this.x ^= this.x >>> 17;
    this.x ^= this.x << 5;
    return ((this.x >>> 0) / 2 ** 32) * 100;
  }

  /** Takes one packet (the view may be reused by the caller: delayed packets are copied). */
  send(packet: Uint8Array): void {
    if (this.roll() < this.opts.lossPercent) {
      this.stats.dropped++;
      return;
    }
    this.stats.passed++;
    if (this.opts.delayMs <= 0 || this.roll() < this.opts.reorderPercent) {
      if (this.opts.delayMs > 0) this.stats.reordered++;
      this.deliver(packet);
      return;
    }
    this.queue.push({ at: performance.now() + this.opts.delayMs, packet: packet.slice() });
    this.arm();
  }

  /** Drops everything still queued and stops the timer. */
  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.queue.length = 0;
    this.head = 0;
  }

  private arm(): void {
    if (this.timer || this.head >= this.queue.length) return;
    const wait = Math.max(0, this.queue[this.head]!.at - performance.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      const now = performance.now();
      while (this.head < this.queue.length && this.queue[this.head]!.at <= now + 0.5)
        this.deliver(this.queue[this.head++]!.packet);
      if (this.head > 1024 && this.head * 2 > this.queue.length) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      this.arm();
    }, wait);
  }
}
