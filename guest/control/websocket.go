package control

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// A minimal RFC 6455 server side: the opening handshake on a hijacked
// net/http connection, unfragmented-or-reassembled messages from the client
// (masked, as §5.3 requires), unmasked frames to it, ping/pong and close.
// Extensions and subprotocols are not negotiated.

const (
	wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
	// MaxWSMessageBytes is the largest message a client may send (a stdin frame of
	// MaxStdinWriteBytes in base64 inside JSON, with room to spare); past it the connection is closed (1009).
	MaxWSMessageBytes = 2 * MaxStdinWriteBytes
	// WSPingInterval is how often the service pings an attached client (the "at least every 15 s").
	WSPingInterval = 10 * time.Second
	// wsWriteTimeout bounds one frame write to a client that stopped reading.
	wsWriteTimeout = 30 * time.Second

	wsText   = 1
	wsBinary = 2
	wsClose  = 8
	wsPing   = 9
	wsPong   = 10
)

// wsConn is one upgraded connection; writes are serialised.
type wsConn struct {
	c   net.Conn
	r   *bufio.Reader
	wmu sync.Mutex
}

// upgradeWS answers the opening handshake (RFC 6455 §4.2.2) and hijacks the connection.
// UPGRADE_REQUIRED-like refusals are VALIDATION_FAILED here (the request is not a handshake).
func upgradeWS(w http.ResponseWriter, r *http.Request) (*wsConn, error) {
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket") ||
		r.Header.Get("Sec-WebSocket-Version") != "13" {
		return nil, fail("VALIDATION_FAILED", "attach speaks WebSocket only (RFC 6455, version 13): read /output by offset otherwise")
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	if k, err := base64.StdEncoding.DecodeString(key); err != nil || len(k) != 16 {
		return nil, fail("VALIDATION_FAILED", "Sec-WebSocket-Key must be base64 of 16 bytes")
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, fail("INTERNAL", "the connection cannot be hijacked")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil, fail("INTERNAL", "hijack: %v", err)
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n"
	if _, err := conn.Write([]byte(resp)); err != nil {
		conn.Close()
		return nil, err
	}
	return &wsConn{c: conn, r: rw.Reader}, nil
}

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// write sends one unmasked frame with FIN set.
func (ws *wsConn) write(op byte, payload []byte) error {
	ws.wmu.Lock()
	defer ws.wmu.Unlock()
	hdr := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, byte(n))
	case n < 1<<16:
		hdr = append(hdr, 126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	_ = ws.c.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
	if _, err := ws.c.Write(append(hdr, payload...)); err != nil {
		return err
	}
	return nil
}

// closeWith sends a close frame with code and reason, then closes the connection.
func (ws *wsConn) closeWith(code uint16, reason string) {
	_ = ws.write(wsClose, append(binary.BigEndian.AppendUint16(nil, code), reason...))
	_ = ws.c.Close()
}

var errWSClosed = errors.New("websocket closed")

// readMessage is the next data message (opcode and payload), answering pings and
// reassembling fragments; errWSClosed after a close frame.
func (ws *wsConn) readMessage() (byte, []byte, error) {
	var msg []byte
	var msgOp byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(ws.r, h[:]); err != nil {
			return 0, nil, err
		}
		fin, op, masked := h[0]&0x80 != 0, h[0]&0x0f, h[1]&0x80 != 0
		if h[0]&0x70 != 0 || !masked {
			ws.closeWith(1002, "protocol error")
			return 0, nil, errWSClosed
		}
		n := uint64(h[1] & 0x7f)
		if n == 126 {
			var b [2]byte
			if _, err := io.ReadFull(ws.r, b[:]); err != nil {
				return 0, nil, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		} else if n == 127 {
			var b [8]byte
			if _, err := io.ReadFull(ws.r, b[:]); err != nil {
				return 0, nil, err
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if n > MaxWSMessageBytes || uint64(len(msg))+n > MaxWSMessageBytes {
			ws.closeWith(1009, "message too big")
			return 0, nil, errWSClosed
		}
		var mask [4]byte
		if _, err := io.ReadFull(ws.r, mask[:]); err != nil {
			return 0, nil, err
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(ws.r, p); err != nil {
			return 0, nil, err
		}
		for i := range p {
			p[i] ^= mask[i%4]
		}
		switch op {
		case wsPing:
			_ = ws.write(wsPong, p)
			continue
		case wsPong:
			continue
		case wsClose:
			ws.closeWith(1000, "")
			return 0, nil, errWSClosed
		case 0: // continuation
			msg = append(msg, p...)
		case wsText, wsBinary:
			msgOp, msg = op, p
		default:
			ws.closeWith(1002, "unknown opcode")
			return 0, nil, errWSClosed
		}
		if fin {
			return msgOp, msg, nil
		}
	}
}
