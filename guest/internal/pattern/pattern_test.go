package pattern

import (
	"regexp"
	"testing"
)

// Every pattern the guest uses matches exactly what package regexp matches, on edge inputs.
func TestPatternsMatchAsRegexpDoes(t *testing.T) {
	srcs := []string{`^grt_[0-9a-f]{32}$`, `^[a-z0-9][a-z0-9-]{0,62}$`, `^[A-Za-z0-9+/]{43}=$`, `^[A-Za-z0-9+/]{86}==$`,
		`^[0-9a-f:]+$`, `^[A-Za-z0-9._:-]+$`, `^[A-Za-z0-9._:-]{1,64}$`, `^[A-Za-z_][A-Za-z0-9_]*$`, `^alloc_[0-9a-f]{32}$`}
	inputs := []string{"", "a", "A", "_", "-", "0", "grt_", "grt_0123456789abcdef0123456789abcdef", "grt_0123456789abcdef0123456789abcdeF",
		"grt_0123456789abcdef0123456789abcdef0", "alloc_0123456789abcdef0123456789abcdef", "h1", "-h", "a-b-c",
		"fd00::2", "fd00::2\n", "k1", "k.1:x-y", "A_b9", "9ab", "a b", "é"}
	long := ""
	for i := 0; i < 86; i++ {
		long += "A"
		inputs = append(inputs, long, long+"=", long+"==", long+"x")
	}
	for _, src := range srcs {
		p, re := MustCompile(src), regexp.MustCompile(src)
		for _, in := range inputs {
			if p.MatchString(in) != re.MatchString(in) {
				t.Errorf("%s on %q: pattern %v, regexp %v", src, in, p.MatchString(in), re.MatchString(in))
			}
		}
	}
}

// A pattern outside the subset is refused when compiled, not misread.
func TestPatternsOutsideTheSubsetAreRefused(t *testing.T) {
	for _, src := range []string{`a`, `^(a|b)$`, `^[a-z]+[a-z]$`, `^a.b$`, `^a{2$`} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: compiled", src)
				}
			}()
			MustCompile(src)
		}()
	}
}
