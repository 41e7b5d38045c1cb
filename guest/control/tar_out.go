package control

import (
	"archive/tar"
	"io"
	"net/http"
	"os"
	"path"
	"syscall"
	"time"
)

// writeTar answers GET /v1/files/tar?path=P: the tree at P as a tar stream (names relative to
// P, directories first; symlinks as links, never followed), walked by descriptor and streamed.
// Past MaxTarEntries or MaxTarBytes the connection is cut mid-stream (no valid end of archive),
// so a client never takes a truncated tree for a whole one.
func writeTar(q *request, c confined) error {
	st, err := statPath(c)
	if err != nil {
		return err
	}
	q.w.Header().Set("content-type", "application/x-tar")
	q.w.WriteHeader(http.StatusOK)
	tw := tar.NewWriter(q.w)
	budget := &tarBudget{}
	if st.Kind == "directory" {
		fd, err := openConfined(c, syscall.O_RDONLY|syscall.O_DIRECTORY)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		err = tarDir(tw, fd, "", budget, 0)
		syscall.Close(fd)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	} else {
		dirfd, name, err := parentOf(c)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		err = tarEntry(tw, dirfd, name, name, budget, 0)
		syscall.Close(dirfd)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
	if tw.Close() != nil {
		panic(http.ErrAbortHandler)
	}
	return nil
}

// tarBudget counts what one tar stream carried (MaxTarEntries, MaxTarBytes).
type tarBudget struct{ entries, bytes int64 }

func (b *tarBudget) take(n int64) error {
	b.entries++
	b.bytes += n
	if b.entries > MaxTarEntries || b.bytes > MaxTarBytes {
		return fail("TOO_LARGE", "the tree passes %d entries or %d bytes (MAX_TAR_ENTRIES, MAX_TAR_BYTES)", MaxTarEntries, int64(MaxTarBytes))
	}
	return nil
}

// maxTarDepth bounds the directory depth of a tar stream, either way.
const maxTarDepth = 256

// tarDir writes the entries of the open directory dirfd, their names under prefix.
func tarDir(tw *tar.Writer, dirfd int, prefix string, b *tarBudget, depth int) error {
	if depth > maxTarDepth {
		return fail("TOO_LARGE", "the tree is deeper than %d directories", maxTarDepth)
	}
	dup, err := syscall.Dup(dirfd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), prefix)
	defer d.Close()
	for {
		names, rerr := d.Readdirnames(1024)
		for _, n := range names {
			if err := tarEntry(tw, dirfd, n, path.Join(prefix, n), b, depth); err != nil {
				return err
			}
		}
		if rerr != nil || len(names) == 0 {
			return nil
		}
	}
}

// tarEntry writes one entry (and, for a directory, its tree) named name in dirfd as tarName.
func tarEntry(tw *tar.Writer, dirfd int, name, tarName string, b *tarBudget, depth int) error {
	var st syscall.Stat_t
	if err := fstatat(dirfd, name, &st, atSymlinkNoFollow); err != nil {
		return err
	}
	h := &tar.Header{Name: tarName, Mode: int64(st.Mode & 0o7777), ModTime: time.Unix(st.Mtim.Sec, 0),
		Uid: int(st.Uid), Gid: int(st.Gid), Format: tar.FormatPAX}
	switch kindOf(st.Mode) {
	case "directory":
		h.Typeflag, h.Name = tar.TypeDir, tarName+"/"
		if err := b.take(0); err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		return tarDir(tw, fd, tarName, b, depth+1)
	case "symlink":
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return err
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
		if err := b.take(0); err != nil {
			return err
		}
		return tw.WriteHeader(h)
	case "file":
		fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		h.Typeflag, h.Size = tar.TypeReg, st.Size
		if err := b.take(st.Size); err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, st.Size)
		return err
	}
	return nil // sockets, devices and fifos are left out
}
