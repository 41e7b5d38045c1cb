package sysinit

import "testing"

func TestParseMountPointsDecodesEscapesAndCleans(t *testing.T) {
	got := parseMountPoints("proc /proc proc rw 0 0\n/dev/vda / ext4 rw 0 0\ntmpfs /mnt/with\\040space tmpfs rw 0 0\nshort\n")
	for _, want := range []string{"/proc", "/", "/mnt/with space"} {
		if !got[want] {
			t.Errorf("no %q in %v", want, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("%v", got)
	}
}

func TestTheTableMountsTheKernelFileSystemsFirst(t *testing.T) {
	// /proc first (Run reads the mount points from it), /dev before what lives under it.
	order := map[string]int{}
	for i, m := range Table {
		order[m.Target] = i
	}
	if order["/proc"] != 0 || order["/dev"] > order["/dev/pts"] || order["/dev"] > order["/dev/shm"] {
		t.Fatalf("%v", order)
	}
}
