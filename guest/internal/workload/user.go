// Package workload decides and starts what runs the one payload of a boot,
// by kind of image (spec "Images"; the Bun guest's workload.ts before it):
//   - dev image: the payload is a shell script run by /bin/sh from memory
//     (it arrives on stdin; only `text/x-shellscript` is accepted);
//   - image converted from OCI: the image's own command from
//     /etc/beachball/workload.json (Entrypoint + Cmd, Env, WorkingDir, User);
//   - systemd reference image: the program named by $BEACHBALL_WORKLOAD_ADAPTER.
//
// In the last two the payload is stored at $BEACHBALL_BOOTSTRAP_PATH, a 0400
// file on the /run tmpfs owned by the workload's user, and its content type
// is in $BEACHBALL_BOOTSTRAP_CONTENT_TYPE. Beachball never interprets it.
// Output goes to the console between the JOB markers. Must never: put the
// payload on a command line, in the environment or on a disk, or run a
// second payload.
package workload

import (
	"fmt"
	"strconv"
	"strings"
)

// User is a resolved workload user: numeric IDs and home directory.
type User struct {
	UID, GID uint32
	Home     string
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func fields(file string, min int) [][]string {
	var out [][]string
	for _, l := range strings.Split(file, "\n") {
		if f := strings.Split(l, ":"); len(f) >= min {
			out = append(out, f)
		}
	}
	return out
}

func atou(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}

// ResolveUser resolves a Docker/OCI `User` (`name`, `uid`, `name:group`,
// `uid:gid`; "" is root) against the contents of /etc/passwd and
// /etc/group. It fails when a name is unknown; a number needs no entry.
func ResolveUser(user, passwd, group string) (User, error) {
	if user == "" {
		return User{0, 0, "/root"}, nil
	}
	parts := strings.Split(user, ":")
	u := parts[0]
	var entry []string
	for _, f := range fields(passwd, 7) {
		if (isDigits(u) && f[2] == u) || (!isDigits(u) && f[0] == u) {
			entry = f
			break
		}
	}
	if entry == nil && !isDigits(u) {
		return User{}, fmt.Errorf("user %q is not in /etc/passwd", u)
	}
	r := User{UID: atou(u), Home: "/"}
	if entry != nil {
		r.UID, r.GID = atou(entry[2]), atou(entry[3])
		if entry[5] != "" {
			r.Home = entry[5]
		}
	}
	if len(parts) > 1 && parts[1] != "" {
		g := parts[1]
		if isDigits(g) {
			r.GID = atou(g)
		} else {
			found := false
			for _, f := range fields(group, 3) {
				if f[0] == g {
					r.GID, found = atou(f[2]), true
					break
				}
			}
			if !found {
				return User{}, fmt.Errorf("group %q is not in /etc/group", g)
			}
		}
	}
	return r, nil
}
