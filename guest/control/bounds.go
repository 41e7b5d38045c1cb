package control

import "time"

// The bounds of the control service: the same numbers as the named constants
// of src/protocol/control.ts (a peer controls every one of these sizes).
const (
	// GuestControlPort is the TCP port of the control service (GUEST_CONTROL_PORT).
	GuestControlPort = 7390
	// GrantHeader is the request header carrying the signed grant (CONTROL_GRANT_HEADER).
	GrantHeader = "beachball-grant"
	// MaxGrantHeaderBytes is the largest grant header accepted, bytes (MAX_CONTROL_GRANT_HEADER_BYTES).
	MaxGrantHeaderBytes = 4096
	// MaxJSONBodyBytes is the largest JSON request body, bytes (MAX_CONTROL_JSON_BODY_BYTES).
	MaxJSONBodyBytes = 256 * 1024
	// MaxVerificationKeys is the most keys one control_config carries (MAX_CONTROL_VERIFICATION_KEYS).
	MaxVerificationKeys = 8
	// MaxExecArgs is the most argv entries (MAX_EXEC_ARGS).
	MaxExecArgs = 1024
	// MaxExecArgBytes is the longest argument, shell line, cwd or user, bytes (MAX_EXEC_ARG_BYTES).
	MaxExecArgBytes = 64 * 1024
	// MaxExecEnv is the most environment variables one exec sets (MAX_EXEC_ENV).
	MaxExecEnv = 256
	// MaxExecEnvValueBytes is the longest environment value, bytes (MAX_EXEC_ENV_VALUE_BYTES).
	MaxExecEnvValueBytes = 32 * 1024
	// MaxExecs is the most execs kept, running and exited (MAX_EXECS).
	MaxExecs = 256
	// MaxExecOutputBytes is the bytes kept per exec and stream on disk (MAX_EXEC_OUTPUT_BYTES).
	MaxExecOutputBytes = 64 * 1024 * 1024
	// MaxExecReadBytes is the most bytes one output read answers (MAX_EXEC_READ_BYTES).
	MaxExecReadBytes = 1024 * 1024
	// MaxExecReadWait is the longest an output read waits for new bytes (MAX_EXEC_READ_WAIT_MS).
	MaxExecReadWait = 25 * time.Second
	// MaxStdinWriteBytes is the largest body of one stdin write, bytes (MAX_EXEC_STDIN_WRITE_BYTES).
	MaxStdinWriteBytes = 1024 * 1024
	// MaxExecTimeoutSeconds is the longest exec timeout, seconds (MAX_EXEC_TIMEOUT_SECONDS).
	MaxExecTimeoutSeconds = 86400
	// MaxPtyDimension is the largest PTY width or height (MAX_PTY_DIMENSION).
	MaxPtyDimension = 1000
	// MaxPathBytes is the longest path a files route accepts, bytes (MAX_CONTROL_PATH_BYTES).
	MaxPathBytes = 4096
	// MaxListEntries is the most entries one listing answers (MAX_LIST_ENTRIES).
	MaxListEntries = 10000
	// MaxFileBytes is the largest file a write or tar entry may make, bytes (MAX_FILE_BYTES).
	MaxFileBytes = 1 << 40
	// MaxTarEntries is the most entries one tar stream carries (MAX_TAR_ENTRIES).
	MaxTarEntries = 100000
	// MaxTarBytes is the most file-content bytes one tar stream carries (MAX_TAR_BYTES).
	MaxTarBytes = 16 << 30
	// ExitDrainGrace is how long, after the process is reaped, the service waits for its output
	// pipes to reach EOF before it reports the exec exited (a daemonised child may hold them open).
	ExitDrainGrace = 2 * time.Second
	// ClockSkew is the skew a grant's issuedAtMs may be in the future (CONNECTION_CLOCK_SKEW_MS).
	ClockSkew = 30 * time.Second
	// MaxGrantTTL is the longest grant lifetime accepted (MAX_GRANT_TTL_SECONDS).
	MaxGrantTTL = 3600 * time.Second
	// MaxConcurrentRequests is the most requests in flight at once, attach sessions and parked
	// output reads included (MAX_CONTROL_CONCURRENT_REQUESTS); past it CONCURRENCY_LIMITED.
	MaxConcurrentRequests = 64
	// IdleConnTimeout closes a keep-alive connection with no request for this long.
	IdleConnTimeout = 120 * time.Second
	// MaxGrantPorts is the most ports one grant lists (MAX_GRANT_PORTS).
	MaxGrantPorts = 16
)
