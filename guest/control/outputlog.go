package control

import (
	"io"
	"os"
	"sync"
)

// outputLog is one stream of an exec's output: an append-only file on disk
// (never held in memory) addressed by byte offset from 0, keeping at most
// MaxExecOutputBytes; bytes past the bound are counted as discarded and the
// log is marked truncated. onChange is called after every append.
type outputLog struct {
	mu        sync.Mutex
	f         *os.File
	size      int64
	truncated bool
	onChange  func()
}

// newOutputLog creates (truncating) the log file at path.
func newOutputLog(path string, onChange func()) (*outputLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &outputLog{f: f, onChange: onChange}, nil
}

// append writes p at the end, up to the bound. Write errors (a full disk) mark the log truncated.
func (l *outputLog) append(p []byte) {
	l.mu.Lock()
	room := MaxExecOutputBytes - l.size
	if int64(len(p)) > room {
		p = p[:room]
		l.truncated = true
	}
	if len(p) > 0 {
		n, err := l.f.Write(p)
		l.size += int64(n)
		if err != nil {
			l.truncated = true
		}
	}
	l.mu.Unlock()
	l.onChange()
}

// state is the log's end offset and whether bytes were discarded.
func (l *outputLog) state() (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size, l.truncated
}

// section is a reader of bytes [off, off+n) (the caller checked they exist).
func (l *outputLog) section(off, n int64) io.Reader {
	return io.NewSectionReader(l.f, off, n)
}

// pump copies r into the log until r fails (EOF, or EIO on a PTY master whose terminal closed).
func (l *outputLog) pump(r io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			l.append(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// remove closes and deletes the log file.
func (l *outputLog) remove() {
	l.mu.Lock()
	defer l.mu.Unlock()
	name := l.f.Name()
	_ = l.f.Close()
	_ = os.Remove(name)
}
