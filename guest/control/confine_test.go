package control

import (
	"os"
	"path/filepath"
	"testing"
)

// Each way out of an allowed root is PATH_ESCAPE, with openat2 and with the O_NOFOLLOW fallback.
func TestPathEscapesAreRefusedWithAndWithoutOpenat2(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "d"), 0o755)
	os.WriteFile(filepath.Join(root, "d", "f"), []byte("x"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "abs"))
	os.Symlink("../../../../../../..", filepath.Join(root, "up"))
	for _, with := range []bool{true, false} {
		haveOpenat2 = with
		for _, p := range []string{root + "/../x", "/etc/passwd", "relative", root + "/abs/passwd", root + "/up/etc/passwd"} {
			c, err := confine([]string{root}, p)
			if err == nil {
				_, err = statPath(c)
			}
			if e, ok := err.(*Error); !ok || e.Code != "PATH_ESCAPE" {
				t.Errorf("openat2=%v %s: %v, want PATH_ESCAPE", with, p, err)
			}
		}
		c, _ := confine([]string{root}, root+"/d/f")
		if st, err := statPath(c); err != nil || st.Kind != "file" {
			t.Errorf("openat2=%v: a path inside the root: %v %v", with, st, err)
		}
	}
	haveOpenat2 = true
}
