package channel

import (
	"io"
	"time"
)

// ReadLoop reads s forever, calling onChunk with each chunk (valid only
// during the call). With retryEOF (the virtio port) an EOF means "host not
// connected": it sleeps EOFRetry and reads again; otherwise (test socket)
// it returns on EOF or error.
func ReadLoop(s Stream, retryEOF bool, onChunk func([]byte)) error {
	buf := make([]byte, ReadChunkBytes)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			onChunk(buf[:n])
			continue
		}
		if !retryEOF {
			if err == nil {
				err = io.EOF
			}
			return err
		}
		time.Sleep(EOFRetry)
	}
}

// SendQueueLength is how many messages may wait for the writer before a sender blocks.
const SendQueueLength = 64

type outgoing struct {
	line []byte
	done chan error
}

// Writer serializes writes to one stream: each line is written whole, in
// the order Send was called. A sender blocks only when SendQueueLength
// lines already wait (the host away for long).
type Writer struct {
	q chan outgoing
}

// NewWriter starts the writer goroutine over s.
func NewWriter(s Stream) *Writer {
	w := &Writer{q: make(chan outgoing, SendQueueLength)}
	go func() {
		for o := range w.q {
			err := writeAll(s, o.line)
			if o.done != nil {
				o.done <- err
			}
		}
	}()
	return w
}

// Send queues line and returns a channel that receives the write's result once it is fully written.
func (w *Writer) Send(line []byte) <-chan error {
	done := make(chan error, 1)
	w.q <- outgoing{line: line, done: done}
	return done
}

func writeAll(s Stream, b []byte) error {
	for len(b) > 0 {
		n, err := s.Write(b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
