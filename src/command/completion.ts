/**
 * Shell completion for `bb` (issue "CLI conventions"): `bb completion
 * bash|zsh|fish` prints a script generated from the command definitions,
 * so every subcommand, flag and enum value the parser accepts completes,
 * and nothing else. The scripts are static: completing never runs `bb`.
 *
 * Each script finds the command path from the words typed so far (skipping
 * flags and the value after a flag that takes one), then offers the
 * subcommands of a group, the flags of a command when the word starts with
 * `-`, the choices of an enum flag after it, and file names for other
 * values and arguments.
 *
 * Lower layer. Must never: embed anything but names and descriptions.
 */
import { aliasesOf, command, walkCommands, type BbCommand, type CommandNode } from "./define.ts";
import { UsageError } from "./run.ts";

/** Shells `bb completion` writes scripts for. */
export const SHELLS = ["bash", "zsh", "fish"] as const;
/** One of SHELLS. */
export type Shell = (typeof SHELLS)[number];

/** What completion needs of one command. */
interface Entry {
  path: string;
  subs: { name: string; description: string }[];
  flags: {
    names: string[];
    long: string;
    short?: string;
    takesValue: boolean;
    choices?: string[];
    description: string;
  }[];
}

function entries(nodes: readonly CommandNode[]): Entry[] {
  const byPath = new Map(nodes.map((n) => [n.path.join(" "), n]));
  return nodes
    .filter((n) => !n.meta.hidden)
    .map((n) => ({
      path: n.path.join(" "),
      subs: n.subCommandNames
        .map((name) => ({ name, description: byPath.get([...n.path, name].join(" "))?.meta.description ?? "" }))
        .filter((s) => !byPath.get(`${n.path.join(" ")} ${s.name}`)?.meta.hidden),
      flags: Object.entries(n.args)
        .filter(([, d]) => d.type !== "positional")
        .map(([name, d]) => {
          const aliases = aliasesOf(d);
          const short = aliases.find((a) => a.length === 1);
          return {
            names: [`--${name}`, ...aliases.map((a) => (a.length === 1 ? `-${a}` : `--${a}`))],
            long: name,
            ...(short ? { short } : {}),
            takesValue: d.type !== "boolean",
            ...(d.type === "enum" && d.options ? { choices: d.options } : {}),
            description: d.description ?? "",
          };
        }),
    }));
}

/** Single-quotes `s` for bash, zsh and fish alike ('…' with ' written as '\''). Fish needs \\ and \' instead. */
function sq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
function fishQ(s: string): string {
  return `'${s.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
}

function bash(es: Entry[]): string {
  const subs = es.map((e) => `    [${sq(e.path)}]=${sq(e.subs.map((s) => s.name).join(" "))}`);
  const flags = es.map((e) => `    [${sq(e.path)}]=${sq([...e.flags.flatMap((f) => f.names), "--help"].join(" "))}`);
  const valued = es.map(
    (e) =>
      `    [${sq(e.path)}]=${sq(
        ` ${e.flags
          .filter((f) => f.takesValue)
          .flatMap((f) => f.names)
          .join(" ")} `,
      )}`,
  );
  const choices = es.flatMap((e) =>
    e.flags
      .filter((f) => f.choices)
      .flatMap((f) => f.names.map((n) => `    [${sq(`${e.path} ${n}`)}]=${sq(f.choices!.join(" "))}`)),
  );
  return `# bash completion for bb, generated from its command definitions by \`bb completion bash\`.
# Load it now:  source <(bb completion bash)
# Or for every shell:  bb completion bash > /etc/bash_completion.d/bb
_bb_complete() {
  local -A subs=(
${subs.join("\n")}
  )
  local -A flags=(
${flags.join("\n")}
  )
  local -A valued=(
${valued.join("\n")}
  )
  local -A choices=(
${choices.join("\n")}
  )
  local cur="\${COMP_WORDS[COMP_CWORD]}" cmdpath="bb" word i skip=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="\${COMP_WORDS[i]}"
    if ((skip)); then skip=0; continue; fi
    case "$word" in
      --*=*) continue ;;
      -*) [[ "\${valued[$cmdpath]}" == *" $word "* ]] && skip=1; continue ;;
    esac
    [[ " \${subs[$cmdpath]} " == *" $word "* ]] && cmdpath="$cmdpath $word"
  done
  local prev="\${COMP_WORDS[COMP_CWORD-1]}"
  if ((COMP_CWORD > 1)) && [[ "\${valued[$cmdpath]}" == *" $prev "* ]]; then
    if [[ -n "\${choices[$cmdpath $prev]+set}" ]]; then
      mapfile -t COMPREPLY < <(compgen -W "\${choices[$cmdpath $prev]}" -- "$cur")
    else
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
    return 0
  fi
  if [[ "$cur" == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "\${flags[$cmdpath]}" -- "$cur")
  elif [[ -n "\${subs[$cmdpath]}" ]]; then
    mapfile -t COMPREPLY < <(compgen -W "\${subs[$cmdpath]}" -- "$cur")
  else
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
  return 0
}
complete -F _bb_complete bb
`;
}

function zsh(es: Entry[]): string {
  const colon = (s: string) => s.replace(/\\/g, "\\\\").replace(/:/g, "\\:");
  const subs = es.map((e) => `    ${sq(e.path)} ${sq(e.subs.map((s) => s.name).join(" "))}`);
  const valued = es.map(
    (e) =>
      `    ${sq(e.path)} ${sq(
        ` ${e.flags
          .filter((f) => f.takesValue)
          .flatMap((f) => f.names)
          .join(" ")} `,
      )}`,
  );
  const cmds = es.map(
    (e) => `    ${sq(e.path)} ${sq(e.subs.map((s) => `${s.name}:${colon(s.description)}`).join("\n"))}`,
  );
  const opts = es.map(
    (e) =>
      `    ${sq(e.path)} ${sq([...e.flags.flatMap((f) => f.names.map((n) => `${n}:${colon(f.description)}`)), "--help:Show this help"].join("\n"))}`,
  );
  const choices = es.flatMap((e) =>
    e.flags
      .filter((f) => f.choices)
      .flatMap((f) => f.names.map((n) => `    ${sq(`${e.path} ${n}`)} ${sq(f.choices!.join(" "))}`)),
  );
  return `#compdef bb
# zsh completion for bb, generated from its command definitions by \`bb completion zsh\`.
# Load it now:  source <(bb completion zsh)   (after compinit)
# Or install it:  bb completion zsh > "\${fpath[1]}/_bb"
_bb() {
  local -A subs valued cmds opts choices
  subs=(
${subs.join("\n")}
  )
  valued=(
${valued.join("\n")}
  )
  cmds=(
${cmds.join("\n")}
  )
  opts=(
${opts.join("\n")}
  )
  choices=(
${choices.join("\n")}
  )
  local cmdpath=bb word i skip=0
  for ((i = 2; i < CURRENT; i++)); do
    word=\${words[i]}
    if ((skip)); then skip=0; continue; fi
    case $word in
      --*=*) continue ;;
      -*) [[ \${valued[$cmdpath]} == *" $word "* ]] && skip=1; continue ;;
    esac
    [[ " \${subs[$cmdpath]} " == *" $word "* ]] && cmdpath="$cmdpath $word"
  done
  local prev=\${words[CURRENT-1]}
  if ((CURRENT > 2)) && [[ \${valued[$cmdpath]} == *" $prev "* ]]; then
    if (( \${+choices[$cmdpath $prev]} )); then
      compadd -- \${=choices[$cmdpath $prev]}
    else
      _files
    fi
    return
  fi
  local -a list
  if [[ $PREFIX == -* ]]; then
    list=("\${(@f)opts[$cmdpath]}")
    _describe -t options option list
  elif [[ -n \${subs[$cmdpath]} ]]; then
    list=("\${(@f)cmds[$cmdpath]}")
    _describe -t commands command list
  else
    _files
  fi
}
if [[ "\${funcstack[1]}" == _bb ]]; then
  _bb "$@"
else
  compdef _bb bb
fi
`;
}

function fish(es: Entry[]): string {
  const cases = (pick: (e: Entry) => string[]) =>
    es.map((e) => `    case ${fishQ(e.path)}\n      printf '%s\\n' ${pick(e).map(fishQ).join(" ")}`).join("\n");
  const lines: string[] = [];
  for (const e of es) {
    const at = fishQ(`test (__bb_path) = ${fishQ(e.path)}`);
    if (e.subs.length > 0) {
      lines.push(`complete -c bb -f -n ${at}`);
      for (const s of e.subs) lines.push(`complete -c bb -f -n ${at} -a ${fishQ(s.name)} -d ${fishQ(s.description)}`);
    }
    for (const f of e.flags) {
      const value = f.choices ? ` -x -a ${fishQ(f.choices.join(" "))}` : f.takesValue ? " -r" : "";
      lines.push(
        `complete -c bb -n ${at} -l ${f.long}${f.short ? ` -s ${f.short}` : ""}${value} -d ${fishQ(f.description)}`,
      );
    }
    lines.push(`complete -c bb -n ${at} -l help -s h -d 'Show this help'`);
  }
  return `# fish completion for bb, generated from its command definitions by \`bb completion fish\`.
# Load it now:  bb completion fish | source
# Or install it:  bb completion fish > ~/.config/fish/completions/bb.fish
function __bb_subs
  switch $argv[1]
${cases((e) => e.subs.map((s) => s.name))}
  end
end
function __bb_valued
  switch $argv[1]
${cases((e) => e.flags.filter((f) => f.takesValue).flatMap((f) => f.names))}
  end
end
function __bb_path
  set -l cmdpath bb
  set -l skip 0
  for w in (commandline -opc)[2..-1]
    if test $skip = 1
      set skip 0
      continue
    end
    switch $w
      case '--*=*'
        continue
      case '-*'
        contains -- $w (__bb_valued $cmdpath); and set skip 1
        continue
    end
    contains -- $w (__bb_subs $cmdpath); and set cmdpath "$cmdpath $w"
  end
  echo $cmdpath
end
${lines.join("\n")}
`;
}

/** The completion script for `shell`, from the commands of the tree. */
export function completionScript(shell: Shell, nodes: readonly CommandNode[]): string {
  const es = entries(nodes);
  return shell === "bash" ? bash(es) : shell === "zsh" ? zsh(es) : fish(es);
}

/** The `bb completion SHELL` command; `root` returns the whole tree (including this command). */
export function completionCommand(root: () => BbCommand): BbCommand {
  return command({
    meta: { name: "completion", description: "Print a shell completion script (bash, zsh or fish)" },
    args: { shell: { type: "positional", required: true, description: "bash, zsh or fish" } },
    examples: [
      "bb completion bash > /etc/bash_completion.d/bb",
      "source <(bb completion zsh)",
      "bb completion fish > ~/.config/fish/completions/bb.fish",
    ],
    async run({ args }) {
      const shell = args.shell as Shell;
      if (!SHELLS.includes(shell))
        throw new UsageError(`unknown shell ${JSON.stringify(args.shell)}: give one of ${SHELLS.join(", ")}`);
      process.stdout.write(completionScript(shell, await walkCommands(root())));
    },
  });
}
