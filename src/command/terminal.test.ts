/**
 * Terminal conventions with fake streams: colour only on a terminal and
 * never with NO_COLOR or TERM=dumb; messages as plain `error: …` lines;
 * tables with a header; progress as plain lines off a terminal and nothing
 * when quiet.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { consola } from "consola";
import { progress, routeMessagesTo, styles, table, useColour, type Stream } from "./terminal.ts";

function fake(isTTY: boolean): Stream & { text: string } {
  const s = { isTTY, text: "", write: (t: string) => void (s.text += t) };
  return s;
}

const ESC = /\x1b\[/;
const savedReporters = [...consola.options.reporters];
const savedLevel = consola.level;
// consola lowers its level under a test runner; the CLI runs at the default (info).
consola.level = 3;
afterAll(() => {
  consola.setReporters(savedReporters);
  consola.level = savedLevel;
});

describe("colour", () => {
  test("only on a terminal, never with NO_COLOR set or TERM=dumb", () => {
    expect(useColour(fake(true), {})).toBe(true);
    expect(useColour(fake(false), {})).toBe(false);
    expect(useColour(fake(true), { NO_COLOR: "1" })).toBe(false);
    expect(useColour(fake(true), { NO_COLOR: "" })).toBe(true);
    expect(useColour(fake(true), { TERM: "dumb" })).toBe(false);
    expect(styles(false).red("x")).toBe("x");
    expect(styles(true).red("x")).toBe("\x1b[31mx\x1b[39m");
  });

  test("messages are one line each with a plain prefix; escapes only on a terminal without NO_COLOR", () => {
    const pipe = fake(false);
    routeMessagesTo(pipe, {});
    consola.error(new Error("it broke"));
    consola.warn("careful");
    consola.info("allocation x (pending)");
    expect(pipe.text).toBe("error: it broke\nwarning: careful\nallocation x (pending)\n");

    const tty = fake(true);
    routeMessagesTo(tty, {});
    consola.error("it broke");
    expect(tty.text).toBe("\x1b[31merror: \x1b[39mit broke\n");

    const noColour = fake(true);
    routeMessagesTo(noColour, { NO_COLOR: "1" });
    consola.error("it broke");
    expect(noColour.text).toBe("error: it broke\n");
  });
});

describe("table", () => {
  test("a header row, columns two spaces apart, the last column unpadded", () => {
    expect(
      table(
        ["ID", "STATE", "REASON"],
        [
          ["a", "pending", "NO_CAPACITY"],
          ["bbbb", "ready", "-"],
        ],
      ),
    ).toBe(["ID    STATE    REASON", "a     pending  NO_CAPACITY", "bbbb  ready    -"].join("\n"));
    expect(table(["HOST"], [])).toBe("HOST");
  });
});

describe("progress", () => {
  test("off a terminal: steps and notes are plain lines, spinner updates are dropped", () => {
    const s = fake(false);
    const p = progress(s);
    p.update("waiting for a host");
    p.step("building the root file system");
    p.note("payload consumed");
    p.stop("done");
    p.stop();
    expect(s.text).toBe("building the root file system\npayload consumed\ndone\n");
    expect(s.text).not.toMatch(ESC);
  });

  test("a terminal that reports no width gets plain lines, not a spinner", () => {
    for (const columns of [0, undefined]) {
      const s = Object.assign(fake(true), { columns });
      const p = progress(s);
      p.update("waiting for a host");
      p.note("payload consumed");
      p.stop();
      expect(s.text).toBe("payload consumed\n");
    }
  });

  test("quiet prints nothing, even on a terminal", () => {
    const s = fake(true);
    const p = progress(s, true);
    p.update("x");
    p.step("y");
    p.note("z");
    p.stop("w");
    expect(s.text).toBe("");
  });
});
