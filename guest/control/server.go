package control

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config is what the guest main (or cmd/control-dev) tells the service.
type Config struct {
	// AllocationID and Generation are the guest's own identity; every grant must name them.
	AllocationID string
	Generation   int64
	// Roots are the absolute directories files routes may touch (and below). Empty: no files routes.
	Roots []string
	// RunDir is a directory the service owns; exec output logs live under RunDir/execs.
	RunDir string
	// LoopbackTesting skips the check that the TCP peer is the grant's clientAddress
	// (cmd/control-dev on loopback only; the guest never sets it).
	LoopbackTesting bool
	// Now is the wall clock (time.Now when nil); tests move it.
	Now func() time.Time
	// StartChild, when set, starts every exec's process through the guest's PID-1 reaper
	// (pid1.Reaper.Start has this shape): a reaper that waits for any child (wait4(-1)) would
	// otherwise take the exit status from the service. Nil: the service waits for its children.
	StartChild StartChildFunc
}

// StartChildFunc runs start (which starts one process and returns its PID) so that the
// process's wait status reaches onExit, once, and no one else.
type StartChildFunc func(start func() (int, error), onExit func(syscall.WaitStatus)) (int, error)

// Server is the control service. Create it with New; it is safe for concurrent use.
type Server struct {
	cfg   Config
	mu    sync.RWMutex
	keys  map[string]ed25519.PublicKey
	self  GrantExpectation // the identity grants must name (cfg's, then each SetIdentity); PeerAddress unused
	execs *execTable
	slots chan struct{} // one per request in flight (MaxConcurrentRequests)
}

// New makes a control service for cfg. It answers GUEST_NOT_READY until SetKeys is called.
func New(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{cfg: cfg, self: GrantExpectation{AllocationID: cfg.AllocationID, Generation: cfg.Generation},
		execs: newExecTable(cfg.RunDir, cfg.StartChild), slots: make(chan struct{}, MaxConcurrentRequests)}
}

// SetIdentity replaces the identity every later grant must name (allocationId and
// generation together), as a restored VM adopts its new one (guest/internal/restore).
// A request already authorised keeps running.
func (s *Server) SetIdentity(allocationID string, generation int64) {
	s.mu.Lock()
	s.self = GrantExpectation{AllocationID: allocationID, Generation: generation}
	s.mu.Unlock()
}

// SetKeys replaces the trusted connection verification keys (key ID → Ed25519
// public key), as each control_config message does (the newest wins).
func (s *Server) SetKeys(keys map[string]ed25519.PublicKey) {
	cp := make(map[string]ed25519.PublicKey, len(keys))
	for k, v := range keys {
		cp[k] = v
	}
	s.mu.Lock()
	s.keys = cp
	s.mu.Unlock()
}

// Serve answers HTTP/1.1 on l until l is closed (then it returns the listener's error).
func (s *Server) Serve(l net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: IdleConnTimeout, MaxHeaderBytes: 64 * 1024}
	return hs.Serve(l)
}

// request is one authorised request: the verified grant and the parsed path.
type request struct {
	w     http.ResponseWriter
	r     *http.Request
	grant *Grant
	parts []string // path segments after /v1/
}

// ServeHTTP bounds the requests in flight (CONCURRENCY_LIMITED), authorises the request
// (GUEST_NOT_READY, CONTROL_UNAUTHORIZED) and routes it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		w.Header().Set("retry-after", "1")
		writeProblem(w, &Error{Code: "CONCURRENCY_LIMITED", Detail: "the control service has its bound of requests in flight (MAX_CONTROL_CONCURRENT_REQUESTS)",
			Extra: map[string]interface{}{"retryAfterSeconds": 1}})
		return
	}
	s.mu.RLock()
	keys, expect := s.keys, s.self
	s.mu.RUnlock()
	if keys == nil {
		writeProblem(w, fail("GUEST_NOT_READY", "the control service has no verification keys yet; retry shortly"))
		return
	}
	if !s.cfg.LoopbackTesting {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		expect.PeerAddress = host
		if expect.PeerAddress == "" {
			expect.PeerAddress = "?"
		}
	}
	g, ref := checkGrant(r.Header.Get(GrantHeader), keys, expect, s.cfg.Now())
	if ref != nil {
		e := fail("CONTROL_UNAUTHORIZED", "%s", ref.Reason)
		e.Extra = map[string]interface{}{"grantCode": ref.Code}
		writeProblem(w, e)
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		writeProblem(w, fail("NOT_FOUND", "no route %s", r.URL.Path))
		return
	}
	req := &request{w: w, r: r, grant: g, parts: strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")}
	if err := s.route(req); err != nil {
		writeProblem(w, err)
	}
}

// route dispatches one authorised request (docs/exec-and-files.md lists every route).
func (s *Server) route(q *request) error {
	p, m := q.parts, q.r.Method
	switch {
	case len(p) >= 1 && p[0] == "execs":
		return s.routeExecs(q, p[1:], m)
	case len(p) == 2 && p[0] == "files":
		return s.routeFiles(q, p[1], m)
	}
	return fail("NOT_FOUND", "no route %s %s", m, q.r.URL.Path)
}

func methodNotAllowed(q *request, allow string) error {
	q.w.Header().Set("allow", allow)
	return fail("METHOD_NOT_ALLOWED", "%s is not allowed on %s (allowed: %s)", q.r.Method, q.r.URL.Path, allow)
}

// readJSON decodes a JSON body of at most MaxJSONBodyBytes into v, refusing unknown fields.
func readJSON(q *request, v interface{}) error {
	body, err := io.ReadAll(io.LimitReader(q.r.Body, MaxJSONBodyBytes+1))
	if err != nil {
		return fail("MALFORMED_JSON", "reading the body: %v", err)
	}
	if len(body) > MaxJSONBodyBytes {
		return fail("TOO_LARGE", "the JSON body is over %d bytes (MAX_CONTROL_JSON_BODY_BYTES)", MaxJSONBodyBytes)
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fail("VALIDATION_FAILED", "the body does not match the route's shape: %v", err)
	}
	return nil
}
