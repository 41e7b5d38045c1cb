/**
 * Reading /proc/self/mountinfo (proc(5), "/proc/pid/mountinfo"): one line
 * per mount, `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL…] - FSTYPE
 * SOURCE SUPER`, where ROOT and POINT escape space, tab, newline and
 * backslash as three octal digits (`\040 \011 \012 \134`, the kernel's
 * seq_file escaping), and which mount holds a path: the one a path walk
 * from the root mount reaches, following overmounts (a mount's parent is
 * the mount it sits on, so a mount at the same point with the lower one as
 * parent hides it, and a mount at /sys hides deeper mounts of its parent).
 * Used by the cgroup hierarchy detection (hierarchy.ts) and the propagation
 * check of the cgroup restore (mountRestore.ts).
 *
 * Pure. Must never: treat a hidden mount as the one holding a path, or
 * decode an escape other than the kernel's `\ooo`.
 */

/** One line of mountinfo, with ROOT and POINT unescaped. */
export interface MountinfoEntry {
  id: string;
  parent: string;
  /** The path inside the mounted filesystem that is mounted (field 4). */
  root: string;
  /** Where it is mounted (field 5). */
  point: string;
  /** Optional fields (`shared:N`, `master:N`, …). */
  optional: string[];
  fstype: string;
  /** Superblock options (the field after the source). */
  superOptions: string;
}

/** `text` with the kernel's octal escapes (`\` and three octal digits) decoded, left to right, each once. */
export function unescapeMountinfo(text: string): string {
  return text.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Parses mountinfo text; lines that are not a mount (no ` - ` separator, too few fields) are skipped. */
export function parseMountinfo(text: string): MountinfoEntry[] {
  const out: MountinfoEntry[] = [];
  for (const line of text.split("\n")) {
    const sep = line.indexOf(" - ");
    if (sep < 0) continue;
    const f = line.slice(0, sep).split(" ");
    const [fstype = "", , superOptions = ""] = line.slice(sep + 3).split(" ");
    if (f.length < 6) continue;
    out.push({
      id: f[0]!,
      parent: f[1]!,
      root: unescapeMountinfo(f[3]!),
      point: unescapeMountinfo(f[4]!),
      optional: f.slice(6),
      fstype,
      superOptions,
    });
  }
  return out;
}

/** True when mount point `point` is `path` or one of its ancestors. */
const covers = (point: string, path: string) => point === "/" || path === point || path.startsWith(`${point}/`);

/**
 * The mount that holds absolute `path`: from the root mount (at `/`, its
 * parent not listed), repeatedly the child that the walk down `path`
 * reaches first (the shortest covering mount point; among equals the last
 * listed, the newest). Null when no root mount is listed.
 */
export function mountHolding(entries: readonly MountinfoEntry[], path: string): MountinfoEntry | null {
  const ids = new Set(entries.map((e) => e.id));
  let cur: MountinfoEntry | null = null;
  for (const e of entries) if (e.point === "/" && !ids.has(e.parent)) cur = e;
  for (let steps = 0; cur && steps < entries.length; steps++) {
    let next: MountinfoEntry | null = null;
    for (const e of entries) {
      if (e === cur || e.parent !== cur.id || !covers(e.point, path)) continue;
      if (!next || e.point.length <= next.point.length) next = e;
    }
    if (!next) break;
    cur = next;
  }
  return cur;
}
