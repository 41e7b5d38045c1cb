package control

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path"
	"strings"
	"syscall"
)

// TarExtractResult is what an extraction made (TarExtractResult in src/protocol/control.ts).
type TarExtractResult struct {
	Path    string `json:"path"`
	Entries int64  `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

// extractTar answers PUT /v1/files/tar?path=P[&sha256=H]: the body, a tar stream, is extracted
// into the directory P (made when missing), confined beneath P itself: an absolute name or a `..`
// component, a symlink whose target is absolute or leads out of P, and any write through a
// symlink that leads out are PATH_ESCAPE; hard links, devices and fifos are FILE_TYPE_MISMATCH;
// MaxTarEntries, MaxTarBytes and MaxFileBytes are TOO_LARGE. Extraction stops at the first
// refusal; what was extracted before it stays. With sha256 the stream's hash is checked at its
// end (CHECKSUM_MISMATCH; the files stay).
func extractTar(q *request, c confined) (TarExtractResult, error) {
	want := q.r.URL.Query().Get("sha256")
	if err := mkdirPath(c, true); err != nil {
		return TarExtractResult{}, err
	}
	top, err := openConfined(c, oPath|syscall.O_DIRECTORY)
	if err != nil {
		return TarExtractResult{}, err
	}
	defer syscall.Close(top)
	h := sha256.New()
	body := io.TeeReader(q.r.Body, h)
	tr := tar.NewReader(body)
	res := TarExtractResult{Path: c.path}
	budget := &tarBudget{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, fail("VALIDATION_FAILED", "the body is not a well-formed tar stream: %v", err)
		}
		if err := budget.take(hdr.Size); err != nil {
			return res, err
		}
		if hdr.Size > MaxFileBytes {
			return res, fail("TOO_LARGE", "tar entry %q is %d bytes, at most %d (MAX_FILE_BYTES)", hdr.Name, hdr.Size, int64(MaxFileBytes))
		}
		if err := extractEntry(top, c.path, hdr, tr); err != nil {
			return res, err
		}
		res.Entries++
		res.Bytes += hdr.Size
	}
	// The archive's end blocks and the writer's record padding are part of the stream's hash.
	if n, _ := io.Copy(io.Discard, io.LimitReader(body, maxTarTrailerBytes+1)); n > maxTarTrailerBytes {
		return res, fail("TOO_LARGE", "more than %d bytes follow the tar stream's end", maxTarTrailerBytes)
	}
	if want != "" {
		if sum := hex.EncodeToString(h.Sum(nil)); sum != want {
			return res, &Error{Code: "CHECKSUM_MISMATCH", Detail: "the tar stream's SHA-256 is " + sum + ", the client sent " + want,
				Extra: map[string]interface{}{"sha256": sum}}
		}
	}
	return res, nil
}

// maxTarTrailerBytes is the most bytes read after the archive's end (GNU tar pads to 10 KiB records).
const maxTarTrailerBytes = 64 * 1024

// tarRel is an entry's name as a clean relative path; PATH_ESCAPE for an absolute one or `..`.
func tarRel(name string) (string, error) {
	if strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 {
		return "", fail("PATH_ESCAPE", "tar entry %q is absolute", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fail("PATH_ESCAPE", "tar entry %q has a `..` component", name)
		}
	}
	rel := strings.TrimPrefix(path.Clean("/"+name), "/")
	if len(rel) > MaxPathBytes {
		return "", fail("TOO_LARGE", "tar entry name is over %d bytes", MaxPathBytes)
	}
	return rel, nil
}

// extractEntry makes one entry beneath top (the directory at dest).
func extractEntry(top int, dest string, hdr *tar.Header, body io.Reader) error {
	rel, err := tarRel(hdr.Name)
	if err != nil {
		return err
	}
	shown := path.Join(dest, rel)
	if rel == "" {
		return nil // the top directory itself
	}
	if strings.Count(rel, "/") > maxTarDepth {
		return fail("TOO_LARGE", "tar entry %q is deeper than %d directories", hdr.Name, maxTarDepth)
	}
	if dir := path.Dir(rel); dir != "." {
		if err := mkdirAllBeneath(top, dir, shown); err != nil {
			return err
		}
	}
	pfd, name, err := parentBeneath(top, rel, shown)
	if err != nil {
		return err
	}
	defer syscall.Close(pfd)
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := syscall.Mkdirat(pfd, name, mode|0o700); err != nil && err != syscall.EEXIST {
			return pathError(shown, err)
		}
		return nil
	case tar.TypeReg, tar.TypeRegA:
		_ = syscall.Unlinkat(pfd, name) // replace a file or symlink there; never write through a link
		fd, err := syscall.Openat(pfd, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, mode)
		if err != nil {
			return pathError(shown, err)
		}
		f := os.NewFile(uintptr(fd), shown)
		defer f.Close()
		if _, err := io.CopyN(f, body, hdr.Size); err != nil {
			return fail("VALIDATION_FAILED", "tar entry %q ended early: %v", hdr.Name, err)
		}
		return nil
	case tar.TypeSymlink:
		t := hdr.Linkname
		if t == "" || strings.HasPrefix(t, "/") || escapes(path.Dir(rel), t) {
			return fail("PATH_ESCAPE", "tar symlink %q → %q leads outside %s", hdr.Name, t, dest)
		}
		_ = syscall.Unlinkat(pfd, name)
		if err := symlinkat(t, pfd, name); err != nil {
			return pathError(shown, err)
		}
		return nil
	}
	return fail("FILE_TYPE_MISMATCH", "tar entry %q is of type %q, which is not extracted (files, directories and symlinks only)", hdr.Name, string(hdr.Typeflag))
}

// escapes is true when the link text t, read from directory dir (relative), climbs above the top.
func escapes(dir, t string) bool {
	depth := 0
	if dir != "." {
		depth = len(splitRel(dir))
	}
	for _, part := range strings.Split(t, "/") {
		switch part {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}
