/**
 * The one text form of a usage error on stderr, for every `bb` command (the
 * Go guest, guest/cmd/beachball-guest, prints the same form):
 *
 *     error: <message>
 *     Run `<command> --help` for usage.
 *
 * the second line only when the fault is in the command line (not in a
 * config file or the environment) and the command has a `--help`. The exit
 * code is always 2 (src/command/run.ts, EXIT.usage).
 *
 * Lower layer; imports nothing, so a source can use it without consola or
 * the parser. Must never: print a secret (messages name flags and files).
 */

/** Usage-error text: `error: MESSAGE` and, when `helpPath` is given, the pointer to `HELPPATH --help`; `red` colours the word `error:`. */
export function usageErrorText(
  message: string,
  helpPath: string | undefined,
  red: (s: string) => string = (s) => s,
): string {
  return `${red("error:")} ${message}\n${helpPath ? `Run \`${helpPath} --help\` for usage.\n` : ""}`;
}
