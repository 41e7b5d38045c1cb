/**
 * The guest's control service (issue 20, "Exec and files"): the TCP port it
 * listens on at the allocation's private address, the header a client
 * presents its signed connection grant in, and the host→guest message that
 * tells the guest which connection verification keys to trust.
 *
 * Owns: those three names, defined once for the agent, the client and the
 * guest binary (guest/, Go), whose contract test checks its messages against
 * these schemas. Implements the spec's rule that VM traffic never passes
 * through the scheduler: exec and files ride the private network, admitted
 * by the host's inner filter and checked again by the guest. Must never:
 * carry a secret (verification keys are public).
 */
import { type Static, Type } from "@sinclair/typebox";
import { EXEC_ID_PATTERN } from "./ids.ts";

/** TCP port of the guest's control service at the allocation's private IPv6 address. */
export const GUEST_CONTROL_PORT = 7390;

/** Request header carrying the client's signed connection grant (canonical JSON, base64url without padding). */
export const CONTROL_GRANT_HEADER = "beachball-grant";

/** Most connection verification keys the agent hands the guest (a deployment rotates one or two at a time). */
export const MAX_CONTROL_VERIFICATION_KEYS = 8;

/**
 * Host → guest: the connection verification keys (key ID → base64 raw
 * 32-byte Ed25519 public key) the guest checks a presented grant against.
 * Sent by the agent after it accepts `guest_ready`, and again whenever it
 * adopts a running VM; the newest message replaces the keys before it.
 */
export const ControlConfigMessage = Type.Object(
  {
    type: Type.Literal("control_config"),
    verificationKeys: Type.Record(
      Type.String({ minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9._:-]+$" }),
      Type.String({ minLength: 43, maxLength: 44 }),
      { maxProperties: MAX_CONTROL_VERIFICATION_KEYS },
    ),
  },
  { additionalProperties: false },
);
/** Host → guest: the connection verification keys. */
export type ControlConfigMessage = Static<typeof ControlConfigMessage>;

// ---------------------------------------------------------------------------
// Exec and files (docs/exec-and-files.md). Every route below is served by the
// guest's control service under /v1/ and needs CONTROL_GRANT_HEADER. The Go
// side (guest/control/bounds.go) holds the same numbers; the contract test
// (test/integration/controlService.test.ts) drives one against the other.
// ---------------------------------------------------------------------------

/** Exec IDs (src/protocol/ids.ts). */
export { EXEC_ID_PREFIX, EXEC_ID_PATTERN } from "./ids.ts";
/** Largest presented grant header, bytes of base64url (a grant's canonical JSON is under 1.5 KiB). */
export const MAX_CONTROL_GRANT_HEADER_BYTES = 4096;
/** Most requests the control service serves at once (attach sessions and parked output reads included); past it CONCURRENCY_LIMITED (429, Retry-After 1). */
export const MAX_CONTROL_CONCURRENT_REQUESTS = 64;
/** Largest JSON request body of a control route, bytes. */
export const MAX_CONTROL_JSON_BODY_BYTES = 256 * 1024;
/** Most arguments of one exec's argv. */
export const MAX_EXEC_ARGS = 1024;
/** Longest one argument, a shell line, a cwd or a user name, bytes. */
export const MAX_EXEC_ARG_BYTES = 64 * 1024;
/** Most environment variables one exec sets. */
export const MAX_EXEC_ENV = 256;
/** Longest one environment value, bytes. */
export const MAX_EXEC_ENV_VALUE_BYTES = 32 * 1024;
/** Most execs the guest keeps (running and exited); past it a new exec is TOO_LARGE until one is removed. */
export const MAX_EXECS = 256;
/**
 * Bytes of output kept per exec and stream, on disk under the guest's run
 * dir. Past it the stream's further bytes are read from the process and
 * discarded (the process never blocks on a full log), the exec view says
 * `outputTruncated`, and a read at the bound answers OUTPUT_TRUNCATED.
 */
export const MAX_EXEC_OUTPUT_BYTES = 64 * 1024 * 1024;
/** Most bytes one output read answers with. */
export const MAX_EXEC_READ_BYTES = 1024 * 1024;
/** Longest an output read waits for bytes past its offset, ms. */
export const MAX_EXEC_READ_WAIT_MS = 25_000;
/** Largest body of one stdin write, bytes. */
export const MAX_EXEC_STDIN_WRITE_BYTES = 1024 * 1024;
/** Longest exec timeout, seconds (a day). */
export const MAX_EXEC_TIMEOUT_SECONDS = 86_400;
/** Largest PTY size, columns and rows each. */
export const MAX_PTY_DIMENSION = 1000;
/** Longest path a files route accepts, bytes (Linux PATH_MAX). */
export const MAX_CONTROL_PATH_BYTES = 4096;
/** Most entries one directory listing answers with (the answer says `truncated` beyond it). */
export const MAX_LIST_ENTRIES = 10_000;
/** Largest file a write or a tar entry may make, bytes (1 TiB: bounded by the disk before it). */
export const MAX_FILE_BYTES = 1024 * 1024 * 1024 * 1024;
/** Most entries one tar stream carries, either way. */
export const MAX_TAR_ENTRIES = 100_000;
/** Most bytes of file content one tar stream carries, either way. */
export const MAX_TAR_BYTES = 16 * 1024 * 1024 * 1024;
/** Response header: the byte offset the answer's body starts at in its log or file. */
export const CONTROL_OFFSET_HEADER = "beachball-offset";
/** Response header: the log's (or upload's) end offset when the answer was made. */
export const CONTROL_END_OFFSET_HEADER = "beachball-end-offset";
/** Response header of an output read: `running` or `exited`. */
export const CONTROL_EXEC_STATE_HEADER = "beachball-exec-state";
/** Response header of a file read or tar stream: SHA-256 (hex) of the whole file, when the answer is the whole file. */
export const CONTROL_SHA256_HEADER = "beachball-sha256";

/** Output streams of an exec: `stdout` and `stderr`, or one `pty` stream for an exec with a terminal. */
export const ExecStream = Type.Union([Type.Literal("stdout"), Type.Literal("stderr"), Type.Literal("pty")]);
/** Output streams of an exec. */
export type ExecStream = Static<typeof ExecStream>;

/** Signals a client may send an exec (names without `SIG`). */
export const ExecSignal = Type.Union(
  ["HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM", "CONT", "STOP", "TSTP", "WINCH"].map((s) => Type.Literal(s)),
);
/** Signals a client may send an exec. */
export type ExecSignal = Static<typeof ExecSignal>;

/** An exec's environment variable name: a shell identifier. */
export const EXEC_ENV_NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$";
/** Longest environment variable name of an exec, characters. */
export const MAX_EXEC_ENV_NAME_CHARS = 256;
const EnvName = Type.String({ minLength: 1, maxLength: MAX_EXEC_ENV_NAME_CHARS, pattern: EXEC_ENV_NAME_PATTERN });
const Dimension = Type.Integer({ minimum: 1, maximum: MAX_PTY_DIMENSION });

/** `POST /v1/execs`: exactly one of `argv` (run as is, resolved on PATH) and `shell` (run by `/bin/sh -c`). */
export const ExecStartBody = Type.Object(
  {
    argv: Type.Optional(
      Type.Array(Type.String({ maxLength: MAX_EXEC_ARG_BYTES }), { minItems: 1, maxItems: MAX_EXEC_ARGS }),
    ),
    shell: Type.Optional(Type.String({ minLength: 1, maxLength: MAX_EXEC_ARG_BYTES })),
    /** Variables set on top of a minimal base (PATH, HOME, USER, TERM for a PTY). */
    env: Type.Optional(
      Type.Record(EnvName, Type.String({ maxLength: MAX_EXEC_ENV_VALUE_BYTES }), { maxProperties: MAX_EXEC_ENV }),
    ),
    /** Absolute working directory; the user's home (or `/`) when absent. */
    cwd: Type.Optional(Type.String({ minLength: 1, maxLength: MAX_CONTROL_PATH_BYTES, pattern: "^/" })),
    /** A user name from /etc/passwd, or a decimal uid; the service's own user when absent. */
    user: Type.Optional(Type.String({ minLength: 1, maxLength: 256, pattern: "^[A-Za-z0-9._-]+$" })),
    /** Seconds until the process group is killed (SIGKILL); no timeout when absent. */
    timeoutSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_EXEC_TIMEOUT_SECONDS })),
    /** A terminal through /dev/ptmx: one `pty` output stream, stdin always open. */
    pty: Type.Optional(Type.Object({ cols: Dimension, rows: Dimension }, { additionalProperties: false })),
    /** Whether stdin is a pipe the client writes (true) or /dev/null (false, the default). */
    stdin: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
/** `POST /v1/execs` body. */
export type ExecStartBody = Static<typeof ExecStartBody>;

/** One exec, as every exec route answers it; kept after exit until the service stops. */
export const ExecView = Type.Object(
  {
    execId: Type.String({ pattern: EXEC_ID_PATTERN }),
    argv: Type.Array(Type.String()),
    pty: Type.Boolean(),
    state: Type.Union([Type.Literal("running"), Type.Literal("exited")]),
    pid: Type.Integer(),
    /** The exit code, or null while running or when a signal ended the process. */
    exitCode: Type.Union([Type.Integer(), Type.Null()]),
    /** The signal that ended the process (`KILL`, `TERM`, ...), or null. */
    signal: Type.Union([Type.String(), Type.Null()]),
    /** True when the exec's timeout killed its process group. */
    timedOut: Type.Boolean(),
    startedAtMs: Type.Integer(),
    endedAtMs: Type.Union([Type.Integer(), Type.Null()]),
    /** Bytes kept of each output stream (its end offset). */
    outputBytes: Type.Record(Type.String(), Type.Integer()),
    /** True when a stream passed MAX_EXEC_OUTPUT_BYTES and later bytes were discarded. */
    outputTruncated: Type.Boolean(),
    /** Bytes of stdin taken so far (the offset the next write must carry). */
    stdinOffset: Type.Integer(),
    stdinOpen: Type.Boolean(),
  },
  { additionalProperties: false },
);
/** One exec. */
export type ExecView = Static<typeof ExecView>;

/** `GET /v1/execs`: the grant's tenant's execs, oldest first. */
export const ExecList = Type.Object({ execs: Type.Array(ExecView) }, { additionalProperties: false });
/** `GET /v1/execs` answer. */
export type ExecList = Static<typeof ExecList>;

/** `POST /v1/execs/{id}/signal`. */
export const ExecSignalBody = Type.Object({ signal: ExecSignal }, { additionalProperties: false });
/** `POST /v1/execs/{id}/signal` body. */
export type ExecSignalBody = Static<typeof ExecSignalBody>;

/** `POST /v1/execs/{id}/resize` (TIOCSWINSZ on the exec's terminal). */
export const ExecResizeBody = Type.Object({ cols: Dimension, rows: Dimension }, { additionalProperties: false });
/** `POST /v1/execs/{id}/resize` body. */
export type ExecResizeBody = Static<typeof ExecResizeBody>;

/** `POST /v1/execs/{id}/stdin?offset=N` answer: the stdin offset after the write (a retried write changes nothing). */
export const StdinWriteResult = Type.Object({ stdinOffset: Type.Integer() }, { additionalProperties: false });
/** Stdin write answer. */
export type StdinWriteResult = Static<typeof StdinWriteResult>;

/** Kinds of file a files route reports. */
export const FileKind = Type.Union([
  Type.Literal("file"),
  Type.Literal("directory"),
  Type.Literal("symlink"),
  Type.Literal("other"),
]);
/** Kinds of file. */
export type FileKind = Static<typeof FileKind>;

/** `GET /v1/files/stat?path=P`, and one entry of a listing (lstat: a symlink is reported, not followed). */
export const FileStat = Type.Object(
  {
    path: Type.String(),
    name: Type.String(),
    kind: FileKind,
    sizeBytes: Type.Integer(),
    /** Permission bits, e.g. 420 for 0644. */
    mode: Type.Integer(),
    modifiedAtMs: Type.Integer(),
    /** The link's target text, for a symlink. */
    linkTarget: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);
/** A file's metadata. */
export type FileStat = Static<typeof FileStat>;

/** `GET /v1/files/list?path=P`: at most MAX_LIST_ENTRIES entries, sorted by name. */
export const FileList = Type.Object(
  { path: Type.String(), entries: Type.Array(FileStat), truncated: Type.Boolean() },
  { additionalProperties: false },
);
/** A directory listing. */
export type FileList = Static<typeof FileList>;

/** `PUT /v1/files/content` and `GET /v1/files/upload` answer: bytes the upload of `path` holds so far. */
export const UploadState = Type.Object(
  {
    path: Type.String(),
    receivedBytes: Type.Integer(),
    /** True once the upload was checked against the client's SHA-256 and renamed onto `path`. */
    complete: Type.Boolean(),
    sha256: Type.Optional(Type.String({ pattern: "^[0-9a-f]{64}$" })),
  },
  { additionalProperties: false },
);
/** An upload's state. */
export type UploadState = Static<typeof UploadState>;

/** `POST /v1/files/mkdir`. */
export const MkdirBody = Type.Object(
  { path: Type.String({ minLength: 1, maxLength: MAX_CONTROL_PATH_BYTES }), parents: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
/** `POST /v1/files/mkdir` body. */
export type MkdirBody = Static<typeof MkdirBody>;

/** `POST /v1/files/move`: rename `from` onto `to` (both confined; an existing `to` is replaced only when `overwrite`). */
export const MoveBody = Type.Object(
  {
    from: Type.String({ minLength: 1, maxLength: MAX_CONTROL_PATH_BYTES }),
    to: Type.String({ minLength: 1, maxLength: MAX_CONTROL_PATH_BYTES }),
    overwrite: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
/** `POST /v1/files/move` body. */
export type MoveBody = Static<typeof MoveBody>;

/** `PUT /v1/files/tar?path=P` answer: what the extraction made. */
export const TarExtractResult = Type.Object(
  { path: Type.String(), entries: Type.Integer(), bytes: Type.Integer() },
  { additionalProperties: false },
);
/** Tar extraction answer. */
export type TarExtractResult = Static<typeof TarExtractResult>;
