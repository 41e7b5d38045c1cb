package workload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const passwd = "root:x:0:0:root:/root:/bin/sh\nci:x:1000:1001:CI:/home/ci:/bin/sh\nweb:x:33:33::/var/www:/usr/sbin/nologin\n"
const group = "root:x:0:\nci:x:1001:\nbuilders:x:2000:ci\n"

func TestResolveUserNamesNumbersAndGroups(t *testing.T) {
	cases := map[string]User{
		"":            {0, 0, "/root"},
		"ci":          {1000, 1001, "/home/ci"},
		"ci:builders": {1000, 2000, "/home/ci"},
		"33":          {33, 33, "/var/www"},
		"4242:4343":   {4242, 4343, "/"},
	}
	for in, want := range cases {
		got, err := ResolveUser(in, passwd, group)
		if err != nil || got != want {
			t.Errorf("ResolveUser(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
}

func TestResolveUserUnknownNamesRefused(t *testing.T) {
	if _, err := ResolveUser("nobody-here", passwd, group); err == nil || !strings.Contains(err.Error(), "not in /etc/passwd") {
		t.Errorf("unknown user: %v", err)
	}
	if _, err := ResolveUser("ci:nogroup", passwd, group); err == nil || !strings.Contains(err.Error(), "not in /etc/group") {
		t.Errorf("unknown group: %v", err)
	}
}

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestPlanAdapterStoresPayloadShellRunsFromStdin(t *testing.T) {
	root := t.TempDir()
	a, err := PlanFor(root, getenv(map[string]string{"BEACHBALL_WORKLOAD_ADAPTER": "/usr/lib/beachball/adapter-shell"}))
	if err != nil || a.Kind != KindAdapter || a.Command.Argv[0] != "/usr/lib/beachball/adapter-shell" || !a.Command.StoresPayload || a.Command.UID != 0 {
		t.Fatalf("adapter plan %+v %v", a, err)
	}
	if a.Refuses("application/x-anything") != "" {
		t.Error("adapter refused a content type")
	}
	s, err := PlanFor(root, getenv(nil))
	if err != nil || s.Kind != KindShell || s.Command.StoresPayload {
		t.Fatalf("shell plan %+v %v", s, err)
	}
	if s.Refuses(ShellScriptContentType) != "" || !strings.Contains(s.Refuses("application/json"), "unsupported content type") {
		t.Error("shell plan content types")
	}
}

func writeImage(t *testing.T, cfg string) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/beachball"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/beachball/workload.json"), []byte(cfg), 0o644)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte(group), 0o644)
	return root
}

func TestPlanOCIFromWorkloadJSON(t *testing.T) {
	root := writeImage(t, `{"entrypoint":["/bin/app"],"cmd":["--x"],"env":["A=1","PATH=/opt/bin"],"workingDir":"/srv","user":"ci:builders"}`)
	p, err := PlanFor(root, getenv(map[string]string{"BEACHBALL_WORKLOAD_ADAPTER": "/ignored"}))
	if err != nil {
		t.Fatal(err)
	}
	c := p.Command
	if p.Kind != KindOCI || strings.Join(c.Argv, " ") != "/bin/app --x" || c.UID != 1000 || c.GID != 2000 || c.Dir != "/srv" || !c.StoresPayload {
		t.Fatalf("oci plan %+v", p)
	}
	if strings.Join(c.Env, " ") != "A=1 HOME=/home/ci PATH=/opt/bin" {
		t.Fatalf("env %v", c.Env)
	}
}

func TestMalformedWorkloadConfigRefused(t *testing.T) {
	ok := `"workingDir":"","user":""`
	for cfg, want := range map[string]string{
		`[]`: "not an object",
		`{"entrypoint":[],"cmd":[],"env":[],` + ok + `}`:                              "both empty",
		`{"entrypoint":["/bin/sh"],"cmd":[],"env":["NOEQUALS"],` + ok + `}`:           "NAME=value",
		`{"entrypoint":["/bin/sh"],"cmd":"echo","env":[],` + ok + `}`:                 "cmd",
		`{"entrypoint":["/bin/sh"],"cmd":null,"env":[],` + ok + `}`:                   "cmd",
		`{"entrypoint":["/bin/sh"],"cmd":[],"env":[]}`:                                "workingDir",
		`{"entrypoint":["/bin/sh"],"cmd":[],"env":[],"workingDir":"","user":"ghost"}`: "not in /etc/passwd",
	} {
		_, err := PlanFor(writeImage(t, cfg), getenv(nil))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", cfg, err, want)
		}
	}
}

func TestStorePayloadIsReadOnlyForItsOwner(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path, err := StorePayload(dir, []byte("secret"), uint32(os.Getuid()), uint32(os.Getgid()))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o400 {
		t.Fatalf("mode %v", st.Mode())
	}
	// A second store (never in one boot, but the file may exist) replaces it.
	if _, err := StorePayload(dir, []byte("again"), uint32(os.Getuid()), uint32(os.Getgid())); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "again" {
		t.Fatalf("content %q", b)
	}
}
