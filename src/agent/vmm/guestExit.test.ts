/** Classification and redaction of a VM's console when it ends on its own (guestExit.ts). */
import { expect, test } from "bun:test";
import { MAX_CONSOLE_TAIL_CHARS } from "../../protocol/agent.ts";
import {
  classifyVmExit,
  describeVmExit,
  ELIDED,
  MAX_KEY_CHARS,
  MAX_TAIL_LINE_CHARS,
  MAX_TAIL_LINES,
  redactedConsoleTail,
} from "./guestExit.ts";

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

/**
 * The console of main-job e2e's sysrq crash as a loaded host printed it (issue 18: the tail a failed run received,
 * its first lines from the same VM's kept console): the panic line sits inside the last MAX_TAIL_LINES lines, but
 * the unreliable `? frame` lines make those lines longer than MAX_CONSOLE_TAIL_CHARS, so the character bound cut it.
 */
const SYSRQ_CRASH_CONSOLE = [
  "[    0.458345] PCI: Fatal: No config space access function found",
  "beachball-init: starting beachball-guest at 5.60s",
  "beachball-guest: ready (shell workload) at 9.13s",
  "BEACHBALL_JOB_START",
  "[   49.358120] sysrq: Trigger a crash",
  "[   49.359604] Kernel panic - not syncing: sysrq triggered crash",
  "[   49.360314] CPU: 0 PID: 142 Comm: sh Not tainted 6.1.0-57-amd64 #1  Debian 6.1.192-3",
  "[   49.360773] Call Trace:",
  "[   49.361337]  <TASK>",
  "[   49.361663]  dump_stack_lvl+0x44/0x5c",
  "[   49.362285]  panic+0x118/0x2f4",
  "[   49.362395]  ? _printk+0x68/0x83",
  "[   49.362502]  sysrq_handle_crash+0x16/0x20",
  "[   49.362640]  __handle_sysrq.cold+0x44/0x11c",
  "[   49.362771]  write_sysrq_trigger+0x24/0x40",
  "[   49.362944]  proc_reg_write+0x56/0xa0",
  "[   49.363064]  vfs_write+0xc7/0x3f0",
  "[   49.363171]  ? filp_close+0x5b/0x70",
  "[   49.363339]  ? do_dup2+0x96/0xd0",
  "[   49.363474]  ksys_write+0x6b/0xf0",
  "[   49.363580]  do_syscall_64+0x5d/0xb0",
  "[   49.363692]  ? __mod_memcg_lruvec_state+0x41/0x90",
  "[   49.363912]  ? __mod_lruvec_page_state+0x93/0x140",
  "[   49.364057]  ? page_add_file_rmap+0x178/0x2f0",
  "[   49.364206]  ? do_set_pte+0x189/0x1d0",
  "[   49.364323]  ? filemap_map_pages+0x153/0x720",
  "[   49.364462]  ? do_fault+0x1a7/0x410",
  "[   49.364571]  ? __handle_mm_fault+0x660/0xfa0",
  "[   49.364707]  ? handle_mm_fault+0xdb/0x2d0",
  "[   49.364869]  ? do_user_addr_fault+0x1b0/0x570",
  "[   49.365007]  ? exit_to_user_mode_prepare+0x44/0x240",
  "[   49.365159]  entry_SYSCALL_64_after_hwframe+0x6e/0xd8",
  "[   49.365406] RIP: 0033:0x47b7a0",
  "[   49.365770] Code: 40 00 48 c7 c2 e0 ff ff ff f7 d8 64 89 02 48 c7 c0 ff ff ff ff eb b7 0f 1f 00 80 3d e8 85 16 00 00 74 17 b8 01 00 00 00 0f 05 <48> 3d 00 f0 ff ff 77 58 c3 0f 1f 80 00 00 00 00 48 83 ec 28 48 89",
  "[   49.366480] RSP: 002b:00007ffea29f5158 EFLAGS: 00000202 ORIG_RAX: 0000000000000001",
  "[   49.367057] RAX: ffffffffffffffda RBX: 0000000000000001 RCX: 000000000047b7a0",
  "[   49.367319] RDX: 0000000000000002 RSI: 000000002d59ff00 RDI: 0000000000000001",
  "[   49.367531] RBP: 000000002d59ff00 R08: 0000000000000000 R09: 00000000005e2740",
  "[   49.367768] R10: 00000000000001b6 R11: 0000000000000202 R12: 0000000000000002",
  "[   49.368047] R13: 000000002d59d3a0 R14: 0000000000000001 R15: 00007ffea29f51c0",
  "[   49.368471]  </TASK>",
  "[   49.369203] Kernel Offset: disabled",
  "[   49.369457] Rebooting in 1 seconds..",
].join("\r\n");

test("a key line inside the last lines but over the character bound is kept (kind: the panic line pushed out of the tail by the size bound)", () => {
  const tail = redactedConsoleTail(SYSRQ_CRASH_CONSOLE, []);
  expect(classifyVmExit(SYSRQ_CRASH_CONSOLE, false)).toBe("KERNEL_PANIC");
  expect(tail).toContain("[   49.359604] Kernel panic - not syncing: sysrq triggered crash");
  expect(tail).toContain("CPU: 0 PID: 142 Comm: sh");
  expect(tail).toContain("sysrq_handle_crash+0x16/0x20");
  expect(tail.endsWith("[   49.369457] Rebooting in 1 seconds..")).toBe(true);
  expect(tail.length).toBeLessThanOrEqual(MAX_CONSOLE_TAIL_CHARS);
  expect(tail).not.toContain("beachball-guest: ready");
});

/**
 * The same crash as the e2e run of 2026-12-02 printed it on Debian's 6.1.192 kernel: five more
 * unreliable (`?`) frames between vfs_write and ksys_write pushed sysrq_handle_crash, the frame that
 * says where the kernel died, out of the character bound.
 */
const SYSRQ_CRASH_LONGER_TRACE = SYSRQ_CRASH_CONSOLE.replace(
  "[   49.363171]  ? filp_close+0x5b/0x70",
  [
    "[   49.363100]  ? kmem_cache_free+0x15/0x310",
    "[   49.363110]  ? f_dupfd+0x47/0x60",
    "[   49.363120]  ? do_fcntl+0x577/0x6e0",
    "[   49.363130]  ? __x64_sys_fcntl+0x90/0xc0",
    "[   49.363140]  ? exit_to_user_mode_prepare+0x44/0x240",
    "[   49.363171]  ? filp_close+0x5b/0x70",
  ].join("\r\n"),
);

test("unreliable trace frames (`? fn+off/len`) give their room to the reliable ones, each run of them one [...] (kind: the frame that says where the kernel died elided by noise)", () => {
  for (const text of [SYSRQ_CRASH_CONSOLE, SYSRQ_CRASH_LONGER_TRACE]) {
    const tail = redactedConsoleTail(text, []);
    expect(tail).toContain("Kernel panic - not syncing: sysrq triggered crash");
    expect(tail).toContain("sysrq_handle_crash+0x16/0x20");
    expect(tail).toContain("[   49.362285]  panic+0x118/0x2f4\n[...]\n[   49.362502]  sysrq_handle_crash+0x16/0x20");
    expect(tail).not.toMatch(/\]\s+\? /);
    expect(tail.endsWith("[   49.369457] Rebooting in 1 seconds..")).toBe(true);
    expect(tail.length).toBeLessThanOrEqual(MAX_CONSOLE_TAIL_CHARS);
  }
});

test("an Oops, a BUG and a trace's first line before a long trace are kept with the panic (kind: key lines other than panic/OOM lost)", () => {
  const frames = Array.from(
    { length: 90 },
    (_, i) => `[    7.${String(200_000 + i).padStart(6, "0")}]  frame_${i}+0x10/0x20`,
  );
  const text = [
    "[    7.100000] BUG: kernel NULL pointer dereference, address: 0000000000000000",
    "[    7.100100] #PF: supervisor write access in kernel mode",
    "[    7.100200] Oops: 0002 [#1] PREEMPT SMP NOPTI",
    "[    7.100300] CPU: 0 PID: 1 Comm: init Not tainted 6.1.0-57-amd64 #1  Debian 6.1.192-3",
    "[    7.100400] Call Trace:",
    ...frames,
    "[    7.300000] Kernel panic - not syncing: Fatal exception",
    ...frames.slice(0, 45),
    "[    7.400000] Rebooting in 1 seconds..",
  ].join("\n");
  const tail = redactedConsoleTail(text, []);
  for (const key of [
    "BUG: kernel NULL pointer",
    "Oops: 0002 [#1]",
    "CPU: 0 PID: 1 Comm: init",
    "Kernel panic - not syncing: Fatal exception",
  ])
    expect(tail).toContain(key);
  expect(tail).toContain(ELIDED);
  expect(tail).not.toContain("#PF: supervisor");
  expect(tail.endsWith("Rebooting in 1 seconds..")).toBe(true);
  expect(tail.length).toBeLessThanOrEqual(MAX_CONSOLE_TAIL_CHARS);
});

test("a panic line glued to workload output that had no newline is classified a panic (kind: a kernel line hidden by unterminated output)", () => {
  const text = "50%\r60% done, still going[   49.350000] Kernel panic - not syncing: sysrq triggered crash\r\n";
  expect(classifyVmExit(text, false)).toBe("KERNEL_PANIC");
  expect(redactedConsoleTail(text, [])).toBe("[   49.350000] Kernel panic - not syncing: sysrq triggered crash");
});

test("lines of any length keep the key lines and the last line within the bound (kind: the size cut taking the line that says why)", () => {
  const long = (t: string, i: number) => `[ ${String(i).padStart(5)}.000000] ${t} ${"y".repeat(3_000)}`;
  const text = [
    long("Kernel panic - not syncing: first", 1),
    ...Array.from({ length: 60 }, (_, i) => long(`frame ${i}`, i + 2)),
    long("last", 99),
  ].join("\n");
  const tail = redactedConsoleTail(text, []);
  expect(tail.length).toBeLessThanOrEqual(MAX_CONSOLE_TAIL_CHARS);
  expect(tail.split("\n")[0]).toStartWith("[     1.000000] Kernel panic - not syncing: first");
  expect(tail).toContain("[    99.000000] last");
  for (const line of tail.split("\n")) expect(line.length).toBeLessThanOrEqual(MAX_TAIL_LINE_CHARS);
});

test("the key lines' share leaves room for the last line (the bounds fit together)", () => {
  expect(MAX_KEY_CHARS + MAX_TAIL_LINE_CHARS + ELIDED.length + 2).toBeLessThanOrEqual(MAX_CONSOLE_TAIL_CHARS);
});

test("over random consoles the tail stays bounded and keeps the first panic line and the last line (kind: key lines lost)", () => {
  let seed = 18;
  const rnd = (n: number) => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed % n;
  };
  const words = [
    "frame+0x10/0x20",
    "?",
    "x".repeat(150),
    "Oops: 0000 [#1] SMP",
    "oom-kill:constraint=CONSTRAINT_NONE",
    "ok",
  ];
  for (let run = 0; run < 200; run++) {
    const lines: string[] = [];
    const n = 1 + rnd(200);
    const panicAt = rnd(n);
    for (let i = 0; i < n; i++) {
      const ts = `[ ${String(i).padStart(5)}.${String(rnd(1e6)).padStart(6, "0")}] `;
      const body = Array.from({ length: 1 + rnd(6) }, () => words[rnd(words.length)]).join(" ");
      const glue = rnd(10) === 0 ? "workload output without a newline" : "";
      lines.push(
        i === panicAt
          ? `${glue}${ts}Kernel panic - not syncing: run ${run}`
          : `${rnd(8) === 0 ? "job line " : ts}${body}`,
      );
    }
    lines.push("[ 99999.000000] Rebooting in 1 seconds..");
    const tail = redactedConsoleTail(lines.join(rnd(2) ? "\r\n" : "\n"), []);
    expect(tail.length).toBeLessThanOrEqual(MAX_CONSOLE_TAIL_CHARS);
    expect(tail).toContain(`Kernel panic - not syncing: run ${run}`);
    expect(tail).not.toContain("workload output");
    expect(tail.endsWith("Rebooting in 1 seconds..")).toBe(true);
    expect(classifyVmExit(lines.join("\n"), false)).toBe(
      lines.some((l) => l.startsWith("[") && l.includes("oom-kill")) ? "GUEST_OOM" : "KERNEL_PANIC",
    );
  }
});
