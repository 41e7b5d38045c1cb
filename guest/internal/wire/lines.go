package wire

import "bytes"

// LineSplitter cuts a byte stream into NDJSON lines of at most max bytes.
// A longer line is dropped whole: the splitter discards bytes up to its
// next newline and then resyncs, so a noisy peer cannot wedge the reader
// or make it buffer without bound (src/protocol/guest.ts NdjsonDecoder).
type LineSplitter struct {
	max      int
	buf      []byte
	skipping bool
	// Dropped counts the over-long lines dropped so far.
	Dropped int
}

// NewLineSplitter returns a splitter bounded by max bytes per line (MaxLineBytes on the wire).
func NewLineSplitter(max int) *LineSplitter {
	return &LineSplitter{max: max}
}

// Push adds a chunk and calls onLine with each complete line it finished
// (without the newline; the slice is valid only during the call).
func (s *LineSplitter) Push(chunk []byte, onLine func([]byte)) {
	for len(chunk) > 0 {
		nl := bytes.IndexByte(chunk, '\n')
		if s.skipping {
			if nl < 0 {
				return
			}
			s.skipping = false
			chunk = chunk[nl+1:]
			continue
		}
		if nl < 0 {
			if len(s.buf)+len(chunk) > s.max {
				s.drop()
				return
			}
			s.buf = append(s.buf, chunk...)
			return
		}
		if len(s.buf)+nl > s.max {
			s.buf = s.buf[:0]
			s.Dropped++
			chunk = chunk[nl+1:]
			continue
		}
		if len(s.buf) == 0 {
			onLine(chunk[:nl])
		} else {
			s.buf = append(s.buf, chunk[:nl]...)
			onLine(s.buf)
			s.buf = s.buf[:0]
		}
		chunk = chunk[nl+1:]
	}
}

func (s *LineSplitter) drop() {
	s.buf = nil
	s.skipping = true
	s.Dropped++
}
