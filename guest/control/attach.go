package control

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Stream IDs in the first byte of an output frame of the attach protocol.
var streamIDs = map[string]byte{"stdout": 1, "stderr": 2, "pty": 3}

// wsChunkBytes is the most output bytes one frame carries.
const wsChunkBytes = 64 * 1024

// attachIn is a client→service message of the attach protocol (a text frame of JSON).
type attachIn struct {
	Type   string `json:"type"` // stdin, resize, signal
	Offset int64  `json:"offset"`
	Data   string `json:"data"` // stdin bytes, standard base64
	Close  bool   `json:"close"`
	Cols   int    `json:"cols"`
	Rows   int    `json:"rows"`
	Signal string `json:"signal"`
}

// attach serves GET /v1/execs/{id}/attach?stdout=N&stderr=M&pty=P (WebSocket, RFC 6455): output
// from those offsets as binary frames (1 byte stream ID: 1 stdout, 2 stderr, 3 pty; 8 bytes
// big-endian offset; the bytes), `{"type":"exit","exec":ExecView}` once every stream is read to
// its end after the exit, then a close frame 1000. The client sends text frames:
// `{"type":"stdin","offset":N,"data":base64,"close":bool}` (answered `{"type":"stdin","stdinOffset":N}`),
// `{"type":"resize","cols":C,"rows":R}`, `{"type":"signal","signal":"INT"}`; a refusal is
// `{"type":"error","code":...,"detail":...}`. A ping goes out every WSPingInterval. Closing the
// connection detaches; it never signals the process.
func (s *Server) attach(q *request, e *execProc) error {
	offsets := map[string]int64{}
	for name := range e.logs {
		off, err := queryInt(q, name, 0, maxWireInteger)
		if err != nil {
			return err
		}
		offsets[name] = off
	}
	ws, err := upgradeWS(q.w, q.r)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(done) }) }
	go func() { // keep-alive
		t := time.NewTicker(WSPingInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if ws.write(wsPing, nil) != nil {
					stop()
					return
				}
			}
		}
	}()
	go func() { // client messages
		defer stop()
		for {
			op, msg, err := ws.readMessage()
			if err != nil {
				return
			}
			if op == wsText {
				s.attachMessage(ws, e, msg)
			}
		}
	}()
	var wg sync.WaitGroup
	for name, off := range offsets {
		wg.Add(1)
		go func(name string, off int64) {
			defer wg.Done()
			pumpAttach(ws, e, name, off, done, stop)
		}(name, off)
	}
	wg.Wait()
	select {
	case <-done:
		_ = ws.c.Close()
	default:
		v, _ := json.Marshal(map[string]interface{}{"type": "exit", "exec": e.view()})
		_ = ws.write(wsText, v)
		ws.closeWith(1000, "exited")
		stop()
	}
	return nil
}

// pumpAttach sends one stream from off until the exec exited and the stream is read to its end.
func pumpAttach(ws *wsConn, e *execProc, name string, off int64, done chan struct{}, stop func()) {
	l := e.logs[name]
	buf := make([]byte, wsChunkBytes)
	for {
		e.mu.Lock()
		ch, exited := e.changed, e.exited
		e.mu.Unlock()
		end, _ := l.state()
		if off > end {
			off = end
		}
		for off < end {
			n := end - off
			if n > wsChunkBytes {
				n = wsChunkBytes
			}
			if _, err := io.ReadFull(l.section(off, n), buf[:n]); err != nil {
				stop()
				return
			}
			frame := append([]byte{streamIDs[name]}, binary.BigEndian.AppendUint64(nil, uint64(off))...)
			if ws.write(wsBinary, append(frame, buf[:n]...)) != nil {
				stop()
				return
			}
			off += n
		}
		if exited {
			return
		}
		select {
		case <-ch:
		case <-done:
			return
		}
	}
}

// attachMessage acts on one client message of the attach protocol.
func (s *Server) attachMessage(ws *wsConn, e *execProc, msg []byte) {
	reply := func(v interface{}) {
		b, _ := json.Marshal(v)
		_ = ws.write(wsText, b)
	}
	refuse := func(err error) {
		ce, ok := err.(*Error)
		if !ok {
			ce = &Error{Code: "INTERNAL", Detail: err.Error()}
		}
		reply(map[string]interface{}{"type": "error", "code": ce.Code, "detail": ce.Detail})
	}
	var m attachIn
	if err := json.Unmarshal(msg, &m); err != nil {
		refuse(fail("MALFORMED_JSON", "an attach message is JSON: %v", err))
		return
	}
	switch m.Type {
	case "stdin":
		data, err := base64.StdEncoding.DecodeString(m.Data)
		if err != nil {
			refuse(fail("VALIDATION_FAILED", "stdin data must be standard base64"))
			return
		}
		n, err := e.takeStdin(m.Offset, data, m.Close)
		if err != nil {
			refuse(err)
			return
		}
		reply(map[string]interface{}{"type": "stdin", "stdinOffset": n})
	case "resize":
		if m.Cols < 1 || m.Rows < 1 || m.Cols > MaxPtyDimension || m.Rows > MaxPtyDimension || e.pty == nil {
			refuse(fail("EXEC_STATE_CONFLICT", "resize needs a terminal and cols, rows in 1..%d", MaxPtyDimension))
			return
		}
		if err := resizePty(e.pty, m.Cols, m.Rows); err != nil {
			refuse(fail("EXEC_STATE_CONFLICT", "resize: %v", err))
		}
	case "signal":
		sig, ok := signals[m.Signal]
		if !ok {
			refuse(fail("VALIDATION_FAILED", "unknown signal %q", m.Signal))
			return
		}
		if err := e.kill(sig); err != nil {
			refuse(err)
		}
	default:
		refuse(fail("VALIDATION_FAILED", "unknown attach message type %q", m.Type))
	}
}
