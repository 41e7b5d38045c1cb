import { describe, expect, test } from "bun:test";
import { workloadConfigProblem } from "./guest.ts";

// Moved from src/guest/workload.test.ts when the Bun guest was removed (the Go guest's own check is
// guest/internal/workload ParseConfig, tested in workload_test.go with the same cases).
describe("workloadConfigProblem", () => {
  test("accepts a converted image's description and rejects malformed ones", () => {
    const ok = { entrypoint: ["/bin/sh"], cmd: [], env: ["A=1"], workingDir: "", user: "" };
    expect(workloadConfigProblem(ok)).toBeNull();
    expect(workloadConfigProblem({ ...ok, entrypoint: [] })).toMatch(/both empty/);
    expect(workloadConfigProblem({ ...ok, env: ["NOEQUALS"] })).toMatch(/NAME=value/);
    expect(workloadConfigProblem({ ...ok, cmd: "echo" })).toMatch(/cmd/);
    expect(workloadConfigProblem([])).toMatch(/not an object/);
  });
});
