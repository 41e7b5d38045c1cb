#!/usr/bin/env bun
/**
 * The `bb` entry point: runs one command line through the strict runner
 * (src/command/main.ts) over the command tree (bin/root.ts), with every
 * message on stderr and results alone on stdout.
 */
import { consola } from "consola";
import { runBb } from "../src/command/main.ts";
import { routeMessagesTo } from "../src/command/terminal.ts";
import { bbCommand } from "./root.ts";

// consola hides info lines when NODE_ENV=test; a role's log level is ours to set (BB_LOG_LEVEL: 0 errors … 4 debug).
consola.level = Number(process.env["BB_LOG_LEVEL"] ?? 3);
routeMessagesTo(process.stderr);

await runBb(bbCommand);
