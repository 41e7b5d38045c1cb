/** Classification and redaction of a VM's console when it ends on its own (guestExit.ts). */
import { expect, test } from "bun:test";
import { MAX_CONSOLE_TAIL_CHARS } from "../../protocol/agent.ts";
import { classifyVmExit, describeVmExit, MAX_TAIL_LINES, redactedConsoleTail } from "./guestExit.ts";

const NONCE = "f".repeat(64);
const PANIC = [
  "BEACHBALL_JOB_START",
  "echo c > /proc/sysrq-trigger",
  `[    5.120000] sysrq: Trigger a crash`,
  `[    5.121000] Kernel panic - not syncing: sysrq triggered crash`,
  `[    5.122000] CPU: 0 PID: 212 Comm: sh Not tainted 6.1.0-57-amd64 #1  Debian`,
  `[    5.123000] Kernel Offset: disabled`,
  `[    5.124000] Rebooting in 1 seconds..`,
].join("\r\n");
const OOM = [
  "[   12.000000] sh invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=-1000",
  "[   12.100000] Out of memory and no killable processes...",
  "[   12.200000] Kernel panic - not syncing: System is deadlocked on memory",
].join("\n");

test("the reason: OOM before panic, then panic, then power-off; else the VMM's state decides", () => {
  expect(classifyVmExit(PANIC, false)).toBe("KERNEL_PANIC");
  expect(classifyVmExit(OOM, false)).toBe("GUEST_OOM");
  expect(classifyVmExit("[    9.000000] reboot: Power down\n", false)).toBe("GUEST_POWEROFF");
  expect(classifyVmExit("[    9.000000] reboot: Restarting system\n", false)).toBe("GUEST_POWEROFF");
  expect(classifyVmExit("", false)).toBe("VMM_CRASHED");
  expect(classifyVmExit("", true)).toBe("GUEST_CHANNEL_LOST");
  // Only kernel lines count: a workload cannot fake a panic by printing the words.
  expect(classifyVmExit("Kernel panic - not syncing: just kidding\n", false)).toBe("VMM_CRASHED");
});

test("the tail keeps kernel lines and job markers, drops what the workload printed, scrubs the nonce", () => {
  const text = `${PANIC}\n[    0.000000] Command line: console=ttyS0 beachball.bootstrap_nonce=${NONCE} quiet\nmy secret payload line ${NONCE}\n`;
  const tail = redactedConsoleTail(text, [NONCE]);
  expect(tail).toContain("Kernel panic - not syncing: sysrq triggered crash");
  expect(tail).toContain("BEACHBALL_JOB_START");
  expect(tail).not.toContain("echo c > /proc/sysrq-trigger");
  expect(tail).not.toContain("my secret payload");
  expect(tail).not.toContain(NONCE);
  expect(tail).toContain("beachball.bootstrap_nonce=[redacted]");
  expect(tail).not.toContain("\r");
});

test("a long stack trace does not push out the line that says why", () => {
  const trace = Array.from(
    { length: 120 },
    (_, i) => `[   12.${String(300 + i).padStart(6, "0")}]  frame_${i}+0x10/0x20`,
  ).join("\n");
  const tail = redactedConsoleTail(`${OOM}\n${trace}\n[   12.999000] Rebooting in 1 seconds..`, []);
  expect(tail).toContain("Out of memory and no killable processes");
  expect(tail).toContain("Kernel panic - not syncing: System is deadlocked on memory");
  expect(tail).toContain("[...]");
  expect(tail.endsWith("Rebooting in 1 seconds..")).toBe(true);
  expect(tail.length).toBeLessThanOrEqual(MAX_CONSOLE_TAIL_CHARS);
  expect(classifyVmExit(`${OOM}\n${trace}`, false)).toBe("GUEST_OOM");
});

test("the tail is bounded in lines and characters, keeping the end", () => {
  const many = Array.from(
    { length: 500 },
    (_, i) => `[ ${String(i).padStart(5)}.000000] ${"x".repeat(100)} line ${i}`,
  ).join("\n");
  const tail = redactedConsoleTail(many, []);
  expect(tail.split("\n").length).toBeLessThanOrEqual(MAX_TAIL_LINES);
  expect(tail.length).toBeLessThanOrEqual(MAX_CONSOLE_TAIL_CHARS);
  expect(tail).toContain("line 499");
  expect(describeVmExit(many, false, []).reason).toBe("VMM_CRASHED");
});

test("a kernel line glued to workload output that had no newline is kept, the workload's part dropped (kind: a panic line hidden by unterminated output)", () => {
  const text = `job output with no newline[   49.350000] Kernel panic - not syncing: sysrq triggered crash\n[   49.360314] CPU: 0 PID: 142 Comm: sh\n`;
  const tail = redactedConsoleTail(text, []);
  expect(tail).toContain("[   49.350000] Kernel panic - not syncing: sysrq triggered crash");
  expect(tail).not.toContain("job output");
});
