package kernelargs

import "testing"

func TestParseKeepsKeyValueTokensTheLastOneWinning(t *testing.T) {
	kv := Parse("console=ttyS0 quiet a=1 =x b= a=2 c=d=e\n")
	if len(kv) != 4 || kv["a"] != "2" || kv["b"] != "" || kv["c"] != "d=e" || kv["console"] != "ttyS0" {
		t.Fatalf("%v", kv)
	}
}
