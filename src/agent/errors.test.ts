/** AgentError: the boundary conversion keeps agent codes, maps the image library's, never adopts a foreign `code`, and keeps the cause chain. */
import { expect, test } from "bun:test";
import { ImageError } from "../image/errors.ts";
import { AgentError, isAgentError } from "./errors.ts";
import { netError } from "./isolation/addressPool.ts";
import { vmmError } from "./vmm/qemuHost.ts";

test("an AgentError passes a boundary unchanged", () => {
  const e = netError("no uplink");
  expect(AgentError.from(e, "INTERNAL")).toBe(e);
  expect(e).toMatchObject({ code: "NETWORK_SETUP_FAILED", subsystem: "isolation" });
});

test("the image library's error becomes its agent code, kept as the cause", () => {
  const img = new ImageError("IMAGE_SIGNATURE_INVALID", "manifest is unsigned");
  const e = AgentError.from(img, "INTERNAL");
  expect(e).toMatchObject({ code: "IMAGE_SIGNATURE_INVALID", subsystem: "image" });
  expect(e.cause).toBe(img);
});

test("a foreign code (an errno) never becomes an agent code", () => {
  const errno = Object.assign(new Error("no such file"), { code: "ENOENT" });
  const e = AgentError.from(errno, "VMM_START_FAILED", "vmm");
  expect(e.code).toBe("VMM_START_FAILED");
  expect(isAgentError(e, "VMM_START_FAILED")).toBe(true);
  expect(isAgentError(errno)).toBe(false);
});

test("chain() reads the causes in order and is bounded", () => {
  const e = new AgentError("CLEANUP_FAILED", "rollback left: netns bb-x", {
    cause: vmmError("QEMU exited", new Error("exit 1")),
  });
  expect(e.chain()).toBe("rollback left: netns bb-x: QEMU exited: exit 1");
  expect(e.chain(10)).toHaveLength(10);
});
