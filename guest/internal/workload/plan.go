package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"beachball/guest/internal/wire"
)

// ShellScriptContentType is the one payload content type the dev image's shell runner accepts.
const ShellScriptContentType = "text/x-shellscript"

// shellRunner runs the payload from memory: the script arrives on stdin, stdin is then detached from it.
const shellRunner = `script=$(cat); exec </dev/null; eval "$script"`

// DefaultPath is the PATH of OCI and adapter workloads.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// shellPath is the PATH of the dev image's shell runner.
const shellPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// MaxWorkloadConfigBytes bounds /etc/beachball/workload.json, bytes (4096 strings of 64 KiB would not fit; the image builder writes far less).
const MaxWorkloadConfigBytes = 8 * 1024 * 1024

// Kind names a plan on the console: shell, oci or adapter.
type Kind string

// The three kinds of plan.
const (
	KindShell   Kind = "shell"
	KindOCI     Kind = "oci"
	KindAdapter Kind = "adapter"
)

// Command is what to run: argv, environment (NAME=value), identity and working directory.
type Command struct {
	Argv          []string
	Env           []string
	UID, GID      uint32
	Dir           string
	StoresPayload bool
}

// Plan is what runs a payload in this image.
type Plan struct {
	Kind    Kind
	Command Command
}

// Refuses says why contentType is refused, or "" when it is accepted (only the shell plan refuses).
func (p Plan) Refuses(contentType string) string {
	if p.Kind == KindShell && contentType != ShellScriptContentType {
		return "unsupported content type " + contentType
	}
	return ""
}

// Config is /etc/beachball/workload.json (src/protocol/guest.ts WorkloadConfig).
type Config struct {
	Entrypoint []string `json:"entrypoint"`
	Cmd        []string `json:"cmd"`
	Env        []string `json:"env"`
	WorkingDir string   `json:"workingDir"`
	User       string   `json:"user"`
}

// configProblem is the first problem with a decoded description, or ""
// (src/protocol/guest.ts workloadConfigProblem; null lists arrive as nil and are refused).
func configProblem(raw map[string]json.RawMessage, w Config) string {
	for _, k := range []string{"entrypoint", "cmd", "env"} {
		v, ok := raw[k]
		if !ok || len(v) == 0 || v[0] != '[' {
			return k + " is not a bounded string array"
		}
	}
	for k, a := range map[string][]string{"entrypoint": w.Entrypoint, "cmd": w.Cmd, "env": w.Env} {
		if len(a) > wire.MaxWorkloadList {
			return k + " is not a bounded string array"
		}
		for _, s := range a {
			if len(s) > wire.MaxWorkloadStringBytes {
				return k + " is not a bounded string array"
			}
		}
	}
	for _, k := range []string{"workingDir", "user"} {
		v, ok := raw[k]
		if !ok || len(v) == 0 || v[0] != '"' {
			return k + " is not a string"
		}
	}
	if len(w.WorkingDir) > wire.MaxWorkloadStringBytes || len(w.User) > wire.MaxWorkloadStringBytes {
		return "workingDir or user is too long"
	}
	if len(w.Entrypoint)+len(w.Cmd) == 0 {
		return "entrypoint and cmd are both empty"
	}
	for _, e := range w.Env {
		if strings.IndexByte(e, '=') <= 0 {
			return "env entries must be NAME=value"
		}
	}
	return ""
}

// ParseConfig decodes and checks a workload description; it fails with the first problem.
func ParseConfig(b []byte) (Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		return Config{}, errors.New("workload config is not an object")
	}
	var w Config
	if err := json.Unmarshal(b, &w); err != nil {
		return Config{}, fmt.Errorf("workload config: %v", err)
	}
	if p := configProblem(raw, w); p != "" {
		return Config{}, errors.New(p)
	}
	return w, nil
}

func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, err
}

// PlanFor picks the plan for the image whose root is root ("/" in a VM;
// tests pass a directory) and the guest's environment getenv. It fails when
// workload.json is malformed or names an unknown user.
func PlanFor(root string, getenv func(string) string) (Plan, error) {
	cfgPath := filepath.Join(root, wire.WorkloadConfigPath)
	if _, err := os.Stat(cfgPath); err == nil {
		b, err := readSmall(cfgPath, MaxWorkloadConfigBytes)
		if err != nil {
			return Plan{}, err
		}
		w, err := ParseConfig(b)
		if err != nil {
			return Plan{}, fmt.Errorf("%s: %v", wire.WorkloadConfigPath, err)
		}
		passwd, _ := readSmall(filepath.Join(root, "etc/passwd"), MaxWorkloadConfigBytes)
		group, _ := readSmall(filepath.Join(root, "etc/group"), MaxWorkloadConfigBytes)
		who, err := ResolveUser(w.User, string(passwd), string(group))
		if err != nil {
			return Plan{}, err
		}
		vars := map[string]string{"PATH": DefaultPath, "HOME": who.Home}
		for _, e := range w.Env {
			eq := strings.IndexByte(e, '=')
			vars[e[:eq]] = e[eq+1:]
		}
		dir := w.WorkingDir
		if dir == "" {
			dir = "/"
		}
		argv := append(append([]string{}, w.Entrypoint...), w.Cmd...)
		return Plan{KindOCI, Command{argv, envList(vars), who.UID, who.GID, dir, true}}, nil
	}
	if adapter := getenv(wire.WorkloadAdapterEnv); adapter != "" {
		env := envList(map[string]string{"PATH": DefaultPath, "HOME": "/root"})
		return Plan{KindAdapter, Command{[]string{adapter}, env, 0, 0, "/root", true}}, nil
	}
	env := envList(map[string]string{"PATH": shellPath, "HOME": "/root"})
	return Plan{KindShell, Command{[]string{"/bin/sh", "-c", shellRunner}, env, 0, 0, "/root", false}}, nil
}

func envList(vars map[string]string) []string {
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
