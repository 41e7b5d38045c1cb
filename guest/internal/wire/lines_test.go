package wire

import (
	"strings"
	"testing"
)

func collect(s *LineSplitter, chunks ...string) []string {
	var out []string
	for _, c := range chunks {
		s.Push([]byte(c), func(l []byte) { out = append(out, string(l)) })
	}
	return out
}

func TestLinesSplitAcrossChunks(t *testing.T) {
	got := collect(NewLineSplitter(100), `{"a":`, "1}\n{\"b\"", ":2}\n\n{\"c\":3}\n")
	if strings.Join(got, "|") != `{"a":1}|{"b":2}||{"c":3}` {
		t.Fatalf("got %q", got)
	}
}

func TestOverLongLineDroppedThenResync(t *testing.T) {
	s := NewLineSplitter(10)
	got := collect(s, "0123456789", "ABCDEF", "GHIJ\n{\"ok\":1}\n", strings.Repeat("x", 11)+"\n", "{\"ok\":2}\n")
	if strings.Join(got, "|") != `{"ok":1}|{"ok":2}` || s.Dropped != 2 {
		t.Fatalf("got %q dropped %d", got, s.Dropped)
	}
}

func TestDecodeHostRefusesNonObjectsAndWrongFieldTypes(t *testing.T) {
	for _, l := range []string{`[]`, `"ping"`, `{"type":"ping","id":7}`, `{not json`, ``} {
		if _, ok := DecodeHost([]byte(l)); ok {
			t.Errorf("accepted %q", l)
		}
	}
	if m, ok := DecodeHost([]byte(` {"type":"ping","id":"x"} `)); !ok || *m.ID != "x" {
		t.Errorf("ping refused")
	}
}

func TestEncodeDoesNotHTMLEscape(t *testing.T) {
	b, _ := Encode(BootstrapRejected{"bootstrap_rejected", "d", "<a & b>"})
	if string(b) != `{"type":"bootstrap_rejected","deliveryId":"d","reason":"<a & b>"}`+"\n" {
		t.Fatalf("got %s", b)
	}
}
