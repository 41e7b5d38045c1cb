package control

import (
	"io"
	"net/http"
	"strconv"
	"time"
)

// routeExecs serves /v1/execs[/{id}[/output|stdin|signal|resize|attach]] (docs/exec-and-files.md).
func (s *Server) routeExecs(q *request, p []string, m string) error {
	if len(p) == 0 || (len(p) == 1 && p[0] == "") {
		switch m {
		case http.MethodPost:
			var b ExecStart
			if err := readJSON(q, &b); err != nil {
				return err
			}
			e, err := s.execs.start(&b, q.grant.Tenant)
			if err != nil {
				return err
			}
			writeJSON(q.w, http.StatusCreated, e.view())
			return nil
		case http.MethodGet:
			views := []ExecView{}
			for _, e := range s.execs.list(q.grant.Tenant) {
				views = append(views, e.view())
			}
			writeJSON(q.w, http.StatusOK, map[string]interface{}{"execs": views})
			return nil
		}
		return methodNotAllowed(q, "GET, POST")
	}
	e, err := s.execs.get(p[0], q.grant.Tenant)
	if err != nil {
		return err
	}
	action := ""
	if len(p) == 2 {
		action = p[1]
	} else if len(p) > 2 {
		return fail("NOT_FOUND", "no route %s", q.r.URL.Path)
	}
	switch {
	case action == "" && m == http.MethodGet:
		writeJSON(q.w, http.StatusOK, e.view())
		return nil
	case action == "" && m == http.MethodDelete:
		if err := s.execs.remove(e); err != nil {
			return err
		}
		q.w.WriteHeader(http.StatusNoContent)
		return nil
	case action == "output" && m == http.MethodGet:
		return readOutput(q, e)
	case action == "stdin" && m == http.MethodPost:
		return writeStdin(q, e)
	case action == "signal" && m == http.MethodPost:
		var b struct {
			Signal string `json:"signal"`
		}
		if err := readJSON(q, &b); err != nil {
			return err
		}
		sig, ok := signals[b.Signal]
		if !ok {
			return fail("VALIDATION_FAILED", "unknown signal %q", b.Signal)
		}
		if err := e.kill(sig); err != nil {
			return err
		}
		writeJSON(q.w, http.StatusOK, e.view())
		return nil
	case action == "resize" && m == http.MethodPost:
		var b PtySize
		if err := readJSON(q, &b); err != nil {
			return err
		}
		if b.Cols < 1 || b.Rows < 1 || b.Cols > MaxPtyDimension || b.Rows > MaxPtyDimension {
			return fail("VALIDATION_FAILED", "cols and rows must be 1..%d", MaxPtyDimension)
		}
		if e.pty == nil {
			return fail("EXEC_STATE_CONFLICT", "exec %s has no terminal", e.id)
		}
		if err := resizePty(e.pty, b.Cols, b.Rows); err != nil {
			return fail("EXEC_STATE_CONFLICT", "resizing exec %s's terminal: %v", e.id, err)
		}
		writeJSON(q.w, http.StatusOK, e.view())
		return nil
	case action == "attach" && m == http.MethodGet:
		return s.attach(q, e)
	}
	return fail("NOT_FOUND", "no route %s %s", m, q.r.URL.Path)
}

// queryInt reads an optional non-negative integer query parameter (VALIDATION_FAILED when malformed).
func queryInt(q *request, name string, def, max int64) (int64, error) {
	v := q.r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, fail("VALIDATION_FAILED", "query %s must be an integer 0..%d", name, max)
	}
	return n, nil
}

// readOutput answers GET /v1/execs/{id}/output?stream=S&offset=N&waitMs=W&maxBytes=B: the bytes
// from N (at most B, MaxExecReadBytes), waiting up to W ms for some when there are none yet.
func readOutput(q *request, e *execProc) error {
	stream := q.r.URL.Query().Get("stream")
	if stream == "" {
		stream = "stdout"
		if e.pty != nil {
			stream = "pty"
		}
	}
	l := e.logs[stream]
	if l == nil {
		return fail("VALIDATION_FAILED", "exec %s has no %q stream", e.id, stream)
	}
	off, err := queryInt(q, "offset", 0, maxWireInteger)
	if err != nil {
		return err
	}
	waitMs, err := queryInt(q, "waitMs", 0, MaxExecReadWait.Milliseconds())
	if err != nil {
		return err
	}
	maxBytes, err := queryInt(q, "maxBytes", MaxExecReadBytes, MaxExecReadBytes)
	if err != nil {
		return err
	}
	deadline := time.NewTimer(time.Duration(waitMs) * time.Millisecond)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		ch, exited := e.changed, e.exited
		e.mu.Unlock()
		end, truncated := l.state()
		if off > end {
			return &Error{Code: "LOG_OFFSET_PAST_END", Detail: "offset is past the stream's end",
				Extra: map[string]interface{}{"endOffset": end}}
		}
		if off == end && truncated {
			return &Error{Code: "OUTPUT_TRUNCATED", Detail: "the stream passed MAX_EXEC_OUTPUT_BYTES; later bytes were discarded",
				Extra: map[string]interface{}{"endOffset": end}}
		}
		if off < end || exited || waitMs == 0 {
			n := end - off
			if n > maxBytes {
				n = maxBytes
			}
			h := q.w.Header()
			h.Set("content-type", "application/octet-stream")
			h.Set("content-length", strconv.FormatInt(n, 10))
			h.Set("beachball-offset", strconv.FormatInt(off, 10))
			h.Set("beachball-end-offset", strconv.FormatInt(end, 10))
			state := "running"
			if exited {
				state = "exited"
			}
			h.Set("beachball-exec-state", state)
			q.w.WriteHeader(http.StatusOK)
			_, _ = io.Copy(q.w, l.section(off, n))
			return nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			waitMs = 0
		case <-q.r.Context().Done():
			return nil
		}
	}
}

// writeStdin answers POST /v1/execs/{id}/stdin?offset=N[&close=1]: the body is stdin bytes
// [N, N+len); bytes before the stdin's current offset were taken already (a retry) and are
// skipped; N past it is OFFSET_MISMATCH. With close=1 stdin is closed after the write
// (EOF on a pipe, ^D on a terminal); a write to a closed stdin is EXEC_STATE_CONFLICT unless
// it carries nothing new.
func writeStdin(q *request, e *execProc) error {
	off, err := queryInt(q, "offset", 0, maxWireInteger)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(q.r.Body, MaxStdinWriteBytes+1))
	if err != nil {
		return fail("VALIDATION_FAILED", "reading the body: %v", err)
	}
	if len(body) > MaxStdinWriteBytes {
		return fail("TOO_LARGE", "a stdin write is at most %d bytes (MAX_EXEC_STDIN_WRITE_BYTES)", MaxStdinWriteBytes)
	}
	n, err := e.takeStdin(off, body, q.r.URL.Query().Get("close") == "1")
	if err != nil {
		return err
	}
	writeJSON(q.w, http.StatusOK, map[string]int64{"stdinOffset": n})
	return nil
}

// takeStdin writes stdin bytes [off, off+len(body)): bytes before the current stdin offset
// were taken already (a retry) and are skipped; off past it is OFFSET_MISMATCH. closeAfter
// closes stdin after the write (EOF on a pipe, ^D on a terminal). New bytes for a closed stdin
// are EXEC_STATE_CONFLICT. Answers the stdin offset after the write.
func (e *execProc) takeStdin(off int64, body []byte, closeAfter bool) (int64, error) {
	e.stdinMu.Lock() // one writer at a time; e.mu is held only briefly, so views never wait on a blocked write
	defer e.stdinMu.Unlock()
	e.mu.Lock()
	f, at := e.stdin, e.stdinOffset
	e.mu.Unlock()
	if off > at {
		return 0, &Error{Code: "OFFSET_MISMATCH", Detail: "the write starts past the stdin's end",
			Extra: map[string]interface{}{"stdinOffset": at}}
	}
	fresh := []byte{}
	if skip := at - off; skip < int64(len(body)) {
		fresh = body[skip:]
	}
	if f == nil {
		if len(fresh) == 0 {
			return at, nil
		}
		return 0, fail("EXEC_STATE_CONFLICT", "exec %s's stdin is closed (or was never open)", e.id)
	}
	n, err := f.Write(fresh)
	e.mu.Lock()
	e.stdinOffset += int64(n)
	at = e.stdinOffset
	e.mu.Unlock()
	if err != nil {
		return 0, fail("EXEC_STATE_CONFLICT", "exec %s's stdin: %v", e.id, err)
	}
	if closeAfter {
		if e.pty != nil {
			_, _ = f.Write([]byte{4})
		} else {
			_ = f.Close()
		}
		e.mu.Lock()
		e.stdin = nil
		e.mu.Unlock()
	}
	return at, nil
}
