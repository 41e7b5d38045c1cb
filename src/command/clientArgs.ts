/**
 * The flags every command that calls the scheduler accepts (`--scheduler`,
 * `--token`, `--json`), as citty args. Their values are resolved with the
 * environment and the config file by ./clientConfig.ts.
 *
 * Lower layer: shared by `bb allocation|host` (src/cli) and `bb proxy`
 * (src/proxy), so neither role imports the other. Must never: carry a
 * default token or URL.
 */

/** citty args every client command accepts. */
export const clientArgs = {
  scheduler: {
    type: "string",
    valueHint: "URL",
    description: "Scheduler URL (or BB_SCHEDULER_URL, or the config file)",
  },
  token: { type: "string", valueHint: "TOKEN", description: "Bearer token (or BB_TOKEN, or the config file)" },
  json: { type: "boolean", description: "Print JSON", default: false },
} as const;
