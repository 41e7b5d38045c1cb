import { describe, expect, test } from "bun:test";
import { adminTransition } from "./hostAdmin.ts";

describe("what an admin change does", () => {
  test("disabling fences; activating and draining set the state", () => {
    expect(adminTransition("active", "disabled")).toBe("fence");
    expect(adminTransition("draining", "disabled")).toBe("fence");
    expect(adminTransition("draining", "active")).toBe("set");
    expect(adminTransition("active", "draining")).toBe("set");
    expect(adminTransition("active", "active")).toBe("set");
  });

  test("a disabled host stays disabled: disabling again changes nothing, anything else is refused", () => {
    expect(adminTransition("disabled", "disabled")).toBe("unchanged");
    expect(adminTransition("disabled", "active")).toBe("refused");
    expect(adminTransition("disabled", "draining")).toBe("refused");
  });
});
