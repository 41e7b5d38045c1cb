/** selectVmmDriver: Firecracker only when every probe passes; otherwise QEMU with the reason. Uses temporary fake binaries; leaves nothing behind. */
import { afterAll, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { selectVmmDriver } from "../../src/agent/vmm/select.ts";

const work = mkdtempSync(join(tmpdir(), "bb-select-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const exe = (name: string, body: string) => {
  const p = join(work, name);
  writeFileSync(p, `#!/bin/sh\n${body}\n`);
  chmodSync(p, 0o755);
  return p;
};
const kvmLike = join(work, "kvm");
writeFileSync(kvmLike, "");

test("Firecracker when the KVM device opens and both binaries run", async () => {
  const s = await selectVmmDriver({
    kvmDevice: kvmLike,
    firecracker: { firecrackerBinary: exe("fc-ok", "exit 0"), jailerBinary: exe("jailer", "exit 0") },
  });
  expect(s.driver.name).toBe("firecracker");
});

test("QEMU, with the reason, when any probe fails", async () => {
  const jailer = exe("jailer2", "exit 0");
  const cases: [Parameters<typeof selectVmmDriver>[0], RegExp][] = [
    [
      {
        kvmDevice: join(work, "no-kvm"),
        firecracker: { firecrackerBinary: exe("fc1", "exit 0"), jailerBinary: jailer },
      },
      /cannot be opened/,
    ],
    [
      { kvmDevice: kvmLike, firecracker: { firecrackerBinary: join(work, "absent"), jailerBinary: jailer } },
      /not an executable file/,
    ],
    [
      { kvmDevice: kvmLike, firecracker: { firecrackerBinary: exe("fc-broken", "exit 1"), jailerBinary: jailer } },
      /--version did not exit 0/,
    ],
  ];
  for (const [opts, why] of cases) {
    const s = await selectVmmDriver(opts);
    expect(s.driver.name).toBe("qemu-microvm");
    expect(s.reason).toMatch(why);
  }
});
