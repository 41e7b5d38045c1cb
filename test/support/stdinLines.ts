/**
 * TEST SUPPORT: the lines a test-support child process reads on stdin, raw
 * or as JSON commands (one object per line; blank lines skipped), ending
 * when stdin closes. Must never: be imported by src/.
 */

/** Each stdin line (without its newline), in order, until stdin closes. */
export async function* stdinLines(): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of Bun.stdin.stream()) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      yield buf.slice(0, nl);
      buf = buf.slice(nl + 1);
    }
  }
}

/** Each non-blank stdin line parsed as JSON. Throws on a line that is not JSON. */
export async function* stdinCommands<T = Record<string, unknown>>(): AsyncGenerator<T> {
  for await (const line of stdinLines()) if (line.trim()) yield JSON.parse(line) as T;
}
