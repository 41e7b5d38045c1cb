/**
 * The heartbeat between the main loop and the health thread, on one thread
 * with a fake clock: the age grows while nobody beats and drops to zero at
 * the first sample after a beat.
 */
import { expect, test } from "bun:test";
import { FakeClock } from "../../protocol/fakeClock.ts";
import { heartbeatBuffer, LoopHeartbeat, LoopWatch } from "./loopHeartbeat.ts";

test("the loop's age grows while no beat comes and resets at the first sample after one", () => {
  const clock = new FakeClock({ monoMs: 1000 });
  const buffer = heartbeatBuffer();
  const beats: number[] = [];
  const beat = new LoopHeartbeat(buffer, () => beats.push(clock.monoMs()));
  const watch = new LoopWatch(buffer, clock);
  clock.advance(700);
  expect(watch.ageMs()).toBe(700);
  beat.tick();
  expect(beats).toEqual([1700]);
  clock.advance(5);
  expect(watch.ageMs()).toBe(0);
  clock.advance(300);
  watch.sample();
  expect(watch.ageMs()).toBe(300);
});

test("start beats at once and stop ends the timer", () => {
  const buffer = heartbeatBuffer();
  let n = 0;
  const beat = new LoopHeartbeat(buffer, () => n++);
  beat.start();
  beat.start();
  expect(n).toBe(1);
  beat.stop();
  expect(new Int32Array(buffer)[0]).toBe(1);
});
