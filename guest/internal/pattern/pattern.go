// Package pattern matches the anchored identifier patterns of src/protocol
// (ids.ts, connection.ts, control.ts) without package regexp, which costs the
// guest binary about 100 KB (issue 20: the guest is at most 5,000,000 bytes).
// A pattern is `^` then atoms then `$`; an atom is a literal byte or a
// bracket class of bytes and ranges (`[A-Za-z0-9._:-]`), each optionally
// followed by `{n}`, `{m,n}`, `+` or `*`. Atoms match greedily without
// backtracking, which is exact when no repeated atom's class holds the byte
// after it (true of every pattern here; MustCompile refuses the rest).
// Must never: accept a pattern outside that subset (MustCompile panics at init).
package pattern

import (
	"fmt"
	"strconv"
	"strings"
)

// Unbounded is an atom's maximum count for `+` and `*`.
const Unbounded = -1

type atom struct {
	set      [256]bool
	min, max int
}

// Pattern is a compiled pattern; safe for concurrent use.
type Pattern struct {
	src   string
	atoms []atom
}

// String is the pattern's source text.
func (p *Pattern) String() string { return p.src }

// MustCompile compiles src; it panics on anything outside the subset the package doc describes.
func MustCompile(src string) *Pattern {
	if !strings.HasPrefix(src, "^") || !strings.HasSuffix(src, "$") {
		panic(fmt.Sprintf("pattern %q: not anchored", src))
	}
	body := src[1 : len(src)-1]
	p := &Pattern{src: src}
	for i := 0; i < len(body); {
		var a atom
		switch c := body[i]; c {
		case '[':
			end := strings.IndexByte(body[i+1:], ']')
			if end < 0 {
				panic(fmt.Sprintf("pattern %q: unclosed class", src))
			}
			cls := body[i+1 : i+1+end]
			for j := 0; j < len(cls); j++ {
				if j+2 < len(cls) && cls[j+1] == '-' {
					for b := int(cls[j]); b <= int(cls[j+2]); b++ {
						a.set[b] = true
					}
					j += 2
				} else {
					a.set[cls[j]] = true
				}
			}
			i += end + 2
		case '(', ')', '|', '.', '?', '\\', '{', '+', '*':
			panic(fmt.Sprintf("pattern %q: %q is outside the subset", src, c))
		default:
			a.set[c] = true
			i++
		}
		a.min, a.max = 1, 1
		if i < len(body) {
			switch body[i] {
			case '+':
				a.max = Unbounded
				i++
			case '*':
				a.min, a.max = 0, Unbounded
				i++
			case '{':
				end := strings.IndexByte(body[i:], '}')
				if end < 0 {
					panic(fmt.Sprintf("pattern %q: unclosed count", src))
				}
				lo, hi, two := strings.Cut(body[i+1:i+end], ",")
				var err1, err2 error
				a.min, err1 = strconv.Atoi(lo)
				a.max = a.min
				if two {
					a.max, err2 = strconv.Atoi(hi)
				}
				if err1 != nil || err2 != nil || a.max < a.min {
					panic(fmt.Sprintf("pattern %q: bad count", src))
				}
				i += end + 1
			}
		}
		if n := len(p.atoms); n > 0 && p.atoms[n-1].max != p.atoms[n-1].min {
			for b := range a.set {
				if a.set[b] && p.atoms[n-1].set[b] {
					panic(fmt.Sprintf("pattern %q: a repeated atom's class overlaps the next atom", src))
				}
			}
		}
		p.atoms = append(p.atoms, a)
	}
	return p
}

// MatchString reports whether the whole of s matches the pattern.
func (p *Pattern) MatchString(s string) bool {
	i := 0
	for _, a := range p.atoms {
		n := 0
		for i < len(s) && (a.max == Unbounded || n < a.max) && a.set[s[i]] {
			i++
			n++
		}
		if n < a.min {
			return false
		}
	}
	return i == len(s)
}
