package control

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"syscall"
)

// UploadState is an upload's progress (UploadState in src/protocol/control.ts).
type UploadState struct {
	Path          string `json:"path"`
	ReceivedBytes int64  `json:"receivedBytes"`
	Complete      bool   `json:"complete"`
	Sha256        string `json:"sha256,omitempty"`
}

// uploadName is the partial file an upload of name grows in, beside it (same filesystem, so the
// final rename is atomic).
func uploadName(name string) string { return "." + name + ".beachball-upload" }

// serveFile answers GET /v1/files/content: the regular file c, whole or the ranges of the
// request's Range header (RFC 9110 §14, by http.ServeContent), streamed from disk.
func serveFile(q *request, c confined) error {
	fd, err := openConfined(c, syscall.O_RDONLY)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), c.path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return pathError(c.path, err)
	}
	if !st.Mode().IsRegular() {
		return fail("FILE_TYPE_MISMATCH", "%s is not a regular file", c.path)
	}
	q.w.Header().Set("content-type", "application/octet-stream")
	http.ServeContent(q.w, q.r, "", st.ModTime(), f)
	return nil
}

// fileSha256 answers GET /v1/files/sha256: the SHA-256 (hex) and size of the regular file c, read once, streamed.
func fileSha256(c confined) (map[string]interface{}, error) {
	fd, err := openConfined(c, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), c.path)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fail("FILE_TYPE_MISMATCH", "%s is not a regular file", c.path)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, pathError(c.path, err)
	}
	return map[string]interface{}{"path": c.path, "sizeBytes": n, "sha256": hex.EncodeToString(h.Sum(nil))}, nil
}

// uploadState answers GET /v1/files/upload: how many bytes the partial upload of c holds.
func uploadState(c confined) (UploadState, error) {
	dirfd, name, err := parentOf(c)
	if err != nil {
		return UploadState{}, err
	}
	defer syscall.Close(dirfd)
	var st syscall.Stat_t
	if err := fstatat(dirfd, uploadName(name), &st, atSymlinkNoFollow); err != nil {
		if err == syscall.ENOENT {
			return UploadState{Path: c.path}, nil
		}
		return UploadState{}, pathError(c.path, err)
	}
	return UploadState{Path: c.path, ReceivedBytes: st.Size}, nil
}

// writeUpload answers PUT /v1/files/content?path=P&offset=N[&sha256=H][&mode=M]: the body is
// bytes [N, N+len) of the file, appended to its partial upload (truncated to N first when it
// holds more: a retried write); N past the partial's end is OFFSET_MISMATCH. With sha256 the
// whole partial is hashed: a match renames it onto P (complete), a mismatch discards it
// (CHECKSUM_MISMATCH). TOO_LARGE past MaxFileBytes.
func writeUpload(q *request, c confined) (UploadState, error) {
	off, err := queryInt(q, "offset", 0, MaxFileBytes)
	if err != nil {
		return UploadState{}, err
	}
	mode, err := queryInt(q, "mode", 0o644, 0o7777)
	if err != nil {
		return UploadState{}, err
	}
	want := q.r.URL.Query().Get("sha256")
	if want != "" && (len(want) != 64 || hex.EncodeToString(mustHex(want)) != want) {
		return UploadState{}, fail("VALIDATION_FAILED", "sha256 must be 64 lower-case hex digits")
	}
	dirfd, name, err := parentOf(c)
	if err != nil {
		return UploadState{}, err
	}
	defer syscall.Close(dirfd)
	part := uploadName(name)
	fd, err := syscall.Openat(dirfd, part, syscall.O_RDWR|syscall.O_CREAT|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, uint32(mode))
	if err != nil {
		return UploadState{}, pathError(c.path, err)
	}
	f := os.NewFile(uintptr(fd), part)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return UploadState{}, pathError(c.path, err)
	}
	if off > st.Size() {
		return UploadState{}, &Error{Code: "OFFSET_MISMATCH", Detail: "the write starts past the upload's end",
			Extra: map[string]interface{}{"receivedBytes": st.Size()}}
	}
	if off < st.Size() {
		if err := f.Truncate(off); err != nil {
			return UploadState{}, pathError(c.path, err)
		}
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return UploadState{}, pathError(c.path, err)
	}
	n, err := io.Copy(f, io.LimitReader(q.r.Body, MaxFileBytes-off+1))
	if off+n > MaxFileBytes {
		_ = f.Truncate(off)
		return UploadState{}, fail("TOO_LARGE", "the file would pass %d bytes (MAX_FILE_BYTES)", int64(MaxFileBytes))
	}
	if err != nil {
		return UploadState{}, fail("VALIDATION_FAILED", "the body ended early after %d bytes: %v", off+n, err)
	}
	got := UploadState{Path: c.path, ReceivedBytes: off + n}
	if want == "" {
		return got, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return UploadState{}, pathError(c.path, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return UploadState{}, pathError(c.path, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != want {
		_ = syscall.Unlinkat(dirfd, part)
		return UploadState{}, &Error{Code: "CHECKSUM_MISMATCH", Detail: "the upload's SHA-256 is " + sum + ", the client sent " + want + "; the partial upload is discarded",
			Extra: map[string]interface{}{"sha256": sum}}
	}
	_ = f.Sync()
	_ = f.Chmod(os.FileMode(mode))
	if err := renameat2(dirfd, part, dirfd, name, 0); err != nil {
		return UploadState{}, pathError(c.path, err)
	}
	got.Complete, got.Sha256 = true, want
	return got, nil
}

func mustHex(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}
