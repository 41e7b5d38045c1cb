package keys

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

func TestParseBoundsKeysAndShapes(t *testing.T) {
	k := base64.StdEncoding.EncodeToString(make([]byte, 32))
	if got, err := Parse(map[string]string{"key-1:a.b_c": k}); err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	many := map[string]string{}
	for i := 0; i <= MaxVerificationKeys; i++ {
		many[fmt.Sprint("k", i)] = k
	}
	for name, raw := range map[string]map[string]string{
		"too many": many, "missing": nil, "bad id": {"a b": k}, "long id": {strings.Repeat("a", 65): k},
		"short key": {"k": base64.StdEncoding.EncodeToString(make([]byte, 31))}, "not base64": {"k": "!!"},
	} {
		if _, err := Parse(raw); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}
