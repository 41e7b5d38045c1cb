package control

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// FileStat is a file's metadata, lstat-style (FileStat in src/protocol/control.ts).
type FileStat struct {
	Path         string `json:"path"`
	Name         string `json:"name"`
	Kind         string `json:"kind"`
	SizeBytes    int64  `json:"sizeBytes"`
	Mode         uint32 `json:"mode"`
	ModifiedAtMs int64  `json:"modifiedAtMs"`
	LinkTarget   string `json:"linkTarget,omitempty"`
}

// kindOf names a st_mode's file type.
func kindOf(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "file"
	case syscall.S_IFDIR:
		return "directory"
	case syscall.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// statAt lstats name in dirfd into a FileStat for path.
func statAt(dirfd int, name, path string) (FileStat, error) {
	var st syscall.Stat_t
	if err := fstatat(dirfd, name, &st, atSymlinkNoFollow); err != nil {
		return FileStat{}, pathError(path, err)
	}
	fs := FileStat{Path: path, Name: filepath.Base(path), Kind: kindOf(st.Mode), SizeBytes: st.Size,
		Mode: st.Mode & 0o7777, ModifiedAtMs: st.Mtim.Sec*1000 + st.Mtim.Nsec/1e6}
	if fs.Kind == "symlink" {
		fs.LinkTarget, _ = readlinkat(dirfd, name)
	}
	return fs, nil
}

// statPath is the FileStat of a confined path (a root is stat'ed through its own descriptor).
func statPath(c confined) (FileStat, error) {
	if c.rel == "" {
		fd, err := openRoot(c.root)
		if err != nil {
			return FileStat{}, pathError(c.path, err)
		}
		defer syscall.Close(fd)
		return statAt(fd, ".", c.path)
	}
	dirfd, name, err := parentOf(c)
	if err != nil {
		return FileStat{}, err
	}
	defer syscall.Close(dirfd)
	return statAt(dirfd, name, c.path)
}

// listDir is at most MaxListEntries entries of the directory c, sorted by name, and whether more exist.
func listDir(c confined) ([]FileStat, bool, error) {
	fd, err := openConfined(c, syscall.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return nil, false, err
	}
	dir := os.NewFile(uintptr(fd), c.path)
	defer dir.Close()
	names, err := dir.Readdirnames(MaxListEntries + 1)
	if err != nil && len(names) == 0 && err.Error() != "EOF" {
		names = nil
	}
	truncated := len(names) > MaxListEntries
	if truncated {
		names = names[:MaxListEntries]
	}
	sort.Strings(names)
	out := make([]FileStat, 0, len(names))
	for _, n := range names {
		if st, err := statAt(fd, n, filepath.Join(c.path, n)); err == nil {
			out = append(out, st)
		}
	}
	return out, truncated, nil
}

// mkdirPath makes the directory c; with parents every missing ancestor too (an existing
// directory is then no error). FILE_EXISTS for an existing c without parents.
func mkdirPath(c confined, parents bool) error {
	if !parents {
		dirfd, name, err := parentOf(c)
		if err != nil {
			return err
		}
		defer syscall.Close(dirfd)
		if err := syscall.Mkdirat(dirfd, name, defaultDirectoryMode); err != nil {
			return pathError(c.path, err)
		}
		return nil
	}
	rootfd, err := openRoot(c.root)
	if err != nil {
		return pathError(c.root, err)
	}
	defer syscall.Close(rootfd)
	return mkdirAllBeneath(rootfd, c.rel, c.path)
}

// mkdirAllBeneath makes rel and its missing ancestors beneath dirfd.
func mkdirAllBeneath(dirfd int, rel, path string) error {
	if rel == "" || rel == "." {
		return nil
	}
	cur := ""
	for _, part := range splitRel(rel) {
		cur = filepath.Join(cur, part)
		pfd, name, err := parentBeneath(dirfd, cur, path)
		if err != nil {
			return err
		}
		err = syscall.Mkdirat(pfd, name, defaultDirectoryMode)
		if err == syscall.EEXIST {
			var st syscall.Stat_t
			if serr := fstatat(pfd, name, &st, atSymlinkNoFollow); serr == nil && kindOf(st.Mode) == "symlink" {
				// A symlink on the way is followed by the next openat2 only if it stays beneath.
				err = nil
			} else if serr == nil && kindOf(st.Mode) != "directory" {
				err = syscall.ENOTDIR
			} else {
				err = nil
			}
		}
		syscall.Close(pfd)
		if err != nil {
			return pathError(path, err)
		}
	}
	return nil
}

// splitRel is rel's non-empty components.
func splitRel(rel string) []string {
	var out []string
	for _, p := range strings.Split(rel, "/") {
		if p != "" && p != "." {
			out = append(out, p)
		}
	}
	return out
}

// movePath renames from onto to (both confined; across roots only when on one filesystem).
// Without overwrite an existing target is FILE_EXISTS.
func movePath(from, to confined, overwrite bool) error {
	ofd, oname, err := parentOf(from)
	if err != nil {
		return err
	}
	defer syscall.Close(ofd)
	nfd, nname, err := parentOf(to)
	if err != nil {
		return err
	}
	defer syscall.Close(nfd)
	var flags uint
	if !overwrite {
		flags = renameNoReplace
	}
	if err := renameat2(ofd, oname, nfd, nname, flags); err != nil {
		if err == syscall.EXDEV {
			return fail("FILE_TYPE_MISMATCH", "%s and %s are on different filesystems", from.path, to.path)
		}
		if err == syscall.EEXIST || err == syscall.ENOTEMPTY {
			return fail("FILE_EXISTS", "%s exists (move with overwrite to replace it)", to.path)
		}
		return pathError(from.path, err)
	}
	return nil
}

// removePath removes c; a directory only when empty unless recursive (then its whole tree,
// walked by descriptor: a symlink inside is removed, never followed).
func removePath(c confined, recursive bool) error {
	dirfd, name, err := parentOf(c)
	if err != nil {
		return err
	}
	defer syscall.Close(dirfd)
	if err := removeAt(dirfd, name, recursive, 0); err != nil {
		return pathError(c.path, err)
	}
	return nil
}

// maxRemoveDepth bounds the recursion of a recursive remove (deeper trees are refused part way).
const maxRemoveDepth = 256

func removeAt(dirfd int, name string, recursive bool, depth int) error {
	var st syscall.Stat_t
	if err := fstatat(dirfd, name, &st, atSymlinkNoFollow); err != nil {
		return err
	}
	if kindOf(st.Mode) != "directory" {
		return syscall.Unlinkat(dirfd, name)
	}
	if recursive {
		if depth > maxRemoveDepth {
			return fail("TOO_LARGE", "the tree is deeper than %d directories", maxRemoveDepth)
		}
		fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		d := os.NewFile(uintptr(fd), name)
		for {
			names, rerr := d.Readdirnames(1024)
			for _, n := range names {
				if err := removeAt(fd, n, true, depth+1); err != nil {
					d.Close()
					return err
				}
			}
			if rerr != nil || len(names) == 0 {
				break
			}
		}
		d.Close()
	}
	return unlinkDir(dirfd, name)
}

func unlinkDir(dirfd int, name string) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall(syscall.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafePointer(p)), atRemoveDir)
	if errno != 0 {
		return errno
	}
	return nil
}
