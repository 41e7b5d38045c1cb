import { describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { agentPaths, loadAgentFiles, saveAgentFiles, type AgentConfig } from "./config.ts";

const config: AgentConfig = {
  schedulerUrl: "http://127.0.0.1:1",
  hostId: "h1",
  region: "r",
  capacity: { cpuMillis: 1000, memoryMiB: 512, ephemeralDiskMiB: 1024, maxPlacements: 1 },
  imageDirs: [],
  consoleBudgetBytes: 1024,
  guestBootTimeoutMs: 1000,
};

describe("agent files", () => {
  test("the credential is written mode 0600 and a wider mode is refused", () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-cfg-"));
    try {
      saveAgentFiles(dir, config, "bbh_h1.secret");
      expect(statSync(agentPaths(dir).credential).mode & 0o777).toBe(0o600);
      expect(loadAgentFiles(dir).credential).toBe("bbh_h1.secret");
      chmodSync(agentPaths(dir).credential, 0o644);
      expect(() => loadAgentFiles(dir)).toThrow("must be 0600");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  test("a host that never joined gets the join command as the fix", () => {
    expect(() => loadAgentFiles("/nonexistent-bb")).toThrow("bb agent join");
  });
});
