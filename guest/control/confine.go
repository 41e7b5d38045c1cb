package control

import (
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"
)

// Path confinement (issue 20 "paths confined (no traversal or symlink escape
// from the allowed roots)"): a client path is split lexically into an
// allowed root and a relative rest (any `..` component is PATH_ESCAPE), and
// the rest is resolved by the kernel beneath the root's descriptor with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS), so no symlink (absolute,
// or `..` inside its text) can lead out; where openat2 is missing (before
// Linux 5.6) each component is opened with O_NOFOLLOW and a symlink on the
// way is refused outright. Every operation then acts on (parent descriptor,
// last name) with the *at system calls, never on a path string again.

const (
	sysOpenat2           = 437 // openat2(2), x86-64 and arm64
	resolveNoMagiclinks  = 0x02
	resolveBeneath       = 0x08
	renameNoReplace      = 0x1
	atRemoveDir          = 0x200
	atSymlinkNoFollow    = 0x100
	oPath                = 0x200000
	openat2Unsupported   = syscall.ENOSYS
	defaultDirectoryMode = 0o755
)

// openHow is struct open_how of <linux/openat2.h>.
type openHow struct{ Flags, Mode, Resolve uint64 }

var haveOpenat2 = true

// openBeneath opens rel (relative, clean, no `..`) beneath the directory dirfd, never leaving it.
func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	if haveOpenat2 {
		p, err := syscall.BytePtrFromString(rel)
		if err != nil {
			return -1, err
		}
		how := openHow{Flags: uint64(flags | syscall.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveBeneath | resolveNoMagiclinks}
		for {
			fd, _, errno := syscall.Syscall6(sysOpenat2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
			if errno == syscall.EINTR || errno == syscall.EAGAIN {
				continue
			}
			if errno == openat2Unsupported {
				haveOpenat2 = false
				break
			}
			if errno != 0 {
				return -1, errno
			}
			return int(fd), nil
		}
	}
	return openNoFollow(dirfd, rel, flags, mode)
}

// openNoFollow is the fallback: each component opened with O_NOFOLLOW (a symlink anywhere is ELOOP/ENOTDIR).
func openNoFollow(dirfd int, rel string, flags int, mode uint32) (int, error) {
	parts := strings.Split(rel, "/")
	cur, err := syscall.Openat(dirfd, ".", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for i, part := range parts {
		if part == "." || part == "" {
			continue
		}
		f := oPath | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
		m := uint32(0)
		if i == len(parts)-1 {
			f, m = flags|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, mode
		}
		next, err := syscall.Openat(cur, part, f, m)
		if err == syscall.ENOTDIR || err == syscall.ELOOP {
			// O_DIRECTORY|O_NOFOLLOW on a symlink is ENOTDIR: a symlink on the way is refused as an escape.
			var st syscall.Stat_t
			if fstatat(cur, part, &st, atSymlinkNoFollow) == nil && kindOf(st.Mode) == "symlink" {
				err = syscall.EXDEV
			}
		}
		syscall.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	if parts[len(parts)-1] == "." || rel == "." {
		next, err := syscall.Openat(cur, ".", flags|syscall.O_CLOEXEC, mode)
		syscall.Close(cur)
		return next, err
	}
	return cur, nil
}

// confined is a client path split into its allowed root and the rest.
type confined struct {
	path string // the cleaned absolute path, as the client names it
	root string
	rel  string // relative to root, "" for the root itself
}

// confine splits p over the allowed roots: PATH_ESCAPE for a relative path, a `..`
// component, or a path under no root; TOO_LARGE past MaxPathBytes.
func confine(roots []string, p string) (confined, error) {
	if len(p) > MaxPathBytes {
		return confined{}, fail("TOO_LARGE", "the path is %d bytes, at most %d (MAX_CONTROL_PATH_BYTES)", len(p), MaxPathBytes)
	}
	if p == "" || p[0] != '/' || strings.IndexByte(p, 0) >= 0 {
		return confined{}, fail("PATH_ESCAPE", "the path %q is not absolute", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return confined{}, fail("PATH_ESCAPE", "the path %q has a `..` component", p)
		}
	}
	clean := filepath.Clean(p)
	for _, r := range roots {
		r = filepath.Clean(r)
		if clean == r {
			return confined{clean, r, ""}, nil
		}
		if strings.HasPrefix(clean, strings.TrimSuffix(r, "/")+"/") {
			return confined{clean, r, strings.TrimPrefix(clean[len(r):], "/")}, nil
		}
	}
	return confined{}, fail("PATH_ESCAPE", "the path %q is outside the allowed roots %v", p, roots)
}

// pathError maps a system call's failure on c to a stable code.
func pathError(c string, err error) error {
	switch err {
	case syscall.EXDEV, syscall.ELOOP:
		return fail("PATH_ESCAPE", "%s leads outside its allowed root (through a symlink)", c)
	case syscall.ENOENT:
		return fail("FILE_NOT_FOUND", "no file %s", c)
	case syscall.ENOTDIR:
		return fail("FILE_TYPE_MISMATCH", "a component of %s is not a directory", c)
	case syscall.EISDIR:
		return fail("FILE_TYPE_MISMATCH", "%s is a directory", c)
	case syscall.EEXIST:
		return fail("FILE_EXISTS", "%s exists", c)
	case syscall.ENOTEMPTY:
		return fail("FILE_EXISTS", "the directory %s is not empty (remove it with recursive)", c)
	}
	if e, ok := err.(*Error); ok {
		return e
	}
	return fail("INTERNAL", "%s: %v", c, err)
}

// openRoot opens an allowed root directory (O_PATH).
func openRoot(root string) (int, error) {
	return syscall.Open(root, oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

// parentOf opens the directory holding c (beneath its root) and returns it with c's last name.
// For a root itself there is no parent: FILE_TYPE_MISMATCH.
func parentOf(c confined) (int, string, error) {
	if c.rel == "" {
		return -1, "", fail("FILE_TYPE_MISMATCH", "%s is an allowed root; it cannot be replaced, moved or removed", c.path)
	}
	rootfd, err := openRoot(c.root)
	if err != nil {
		return -1, "", pathError(c.root, err)
	}
	defer syscall.Close(rootfd)
	return parentBeneath(rootfd, c.rel, c.path)
}

// parentBeneath opens the parent directory of rel beneath dirfd; name is for errors.
func parentBeneath(dirfd int, rel, name string) (int, string, error) {
	dir, base := filepath.Split(rel)
	fd, err := openBeneath(dirfd, strings.TrimSuffix(dir, "/"), oPath|syscall.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", pathError(name, err)
	}
	return fd, base, nil
}

// openConfined opens c itself beneath its root with flags.
func openConfined(c confined, flags int) (int, error) {
	rootfd, err := openRoot(c.root)
	if err != nil {
		return -1, pathError(c.root, err)
	}
	defer syscall.Close(rootfd)
	fd, err := openBeneath(rootfd, c.rel, flags, 0)
	if err != nil {
		return -1, pathError(c.path, err)
	}
	return fd, nil
}

// readlinkat is readlinkat(2) (missing from package syscall).
func readlinkat(dirfd int, name string) (string, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return "", err
	}
	buf := make([]byte, MaxPathBytes)
	n, _, errno := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if errno != 0 {
		return "", errno
	}
	return string(buf[:n]), nil
}

// symlinkat is symlinkat(2).
func symlinkat(target string, dirfd int, name string) error {
	t, err := syscall.BytePtrFromString(target)
	if err != nil {
		return err
	}
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall(syscall.SYS_SYMLINKAT, uintptr(unsafe.Pointer(t)), uintptr(dirfd), uintptr(unsafe.Pointer(p)))
	if errno != 0 {
		return errno
	}
	return nil
}

// renameat2 is renameat2(2) with flags (renameNoReplace refuses an existing target with EEXIST).
func renameat2(olddir int, oldname string, newdir int, newname string, flags uint) error {
	o, err := syscall.BytePtrFromString(oldname)
	if err != nil {
		return err
	}
	n, err := syscall.BytePtrFromString(newname)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall6(sysRenameat2, uintptr(olddir), uintptr(unsafe.Pointer(o)), uintptr(newdir), uintptr(unsafe.Pointer(n)), uintptr(flags), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// unsafePointer converts a byte pointer for a raw system call.
func unsafePointer(p *byte) unsafe.Pointer { return unsafe.Pointer(p) }

// fstatat is fstatat(2) (not exported by package syscall on every architecture).
func fstatat(dirfd int, name string, st *syscall.Stat_t, flags int) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall6(sysFstatat, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
