package control

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// passwdEntry is one line of /etc/passwd: what an exec's `user` resolves to.
type passwdEntry struct {
	Name     string
	UID, GID uint32
	Home     string
}

// passwdPath is the user database read (a variable so tests can point it elsewhere).
var passwdPath = "/etc/passwd"

// lookupUser resolves a user name, or a decimal uid, through /etc/passwd. A
// uid with no entry runs with gid = uid and home `/`. EXEC_START_FAILED when
// a name has no entry.
func lookupUser(user string) (passwdEntry, error) {
	uid, numErr := strconv.ParseUint(user, 10, 32)
	if f, err := os.Open(passwdPath); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Split(sc.Text(), ":")
			if len(fs) < 7 {
				continue
			}
			u, e1 := strconv.ParseUint(fs[2], 10, 32)
			g, e2 := strconv.ParseUint(fs[3], 10, 32)
			if e1 != nil || e2 != nil {
				continue
			}
			if fs[0] == user || (numErr == nil && u == uid) {
				return passwdEntry{Name: fs[0], UID: uint32(u), GID: uint32(g), Home: fs[5]}, nil
			}
		}
	}
	if numErr == nil {
		return passwdEntry{Name: user, UID: uint32(uid), GID: uint32(uid), Home: "/"}, nil
	}
	return passwdEntry{}, fail("EXEC_START_FAILED", "no user %q in %s", user, passwdPath)
}
