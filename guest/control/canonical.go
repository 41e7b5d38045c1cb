package control

import (
	"sort"
	"strconv"
	"strings"
)

// canonicalJSON is the canonical JSON text of v, byte for byte the same as
// canonicalJson in src/protocol/canonical.ts: object keys sorted (by UTF-16
// code units, as Array.prototype.sort does; the same order as bytes for the
// ASCII keys a grant has), no whitespace, strings escaped as JSON.stringify
// escapes them (see appendJSString). v holds only the values a grant
// holds: map[string]interface{}, []interface{}, string, int64, bool, nil.
// Go's encoding/json is not used: it HTML-escapes and escapes U+2028/U+2029,
// which JSON.stringify does not.
func canonicalJSON(v interface{}) string {
	var b strings.Builder
	appendCanonical(&b, v)
	return b.String()
}

func appendCanonical(b *strings.Builder, v interface{}) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case string:
		appendJSString(b, x)
	case []interface{}:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			appendCanonical(b, e)
		}
		b.WriteByte(']')
	case map[string]interface{}:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			appendJSString(b, k)
			b.WriteByte(':')
			appendCanonical(b, x[k])
		}
		b.WriteByte('}')
	default:
		panic("canonicalJSON: unsupported value type")
	}
}

// appendJSString writes s quoted as ECMAScript's JSON.stringify quotes a
// well-formed string (ECMA-262 QuoteJSONString): `"` and `\` escaped, the
// short escapes \b \t \n \f \r, other code points below U+0020 as \u00xx
// (lower-case hex), every other character as itself in UTF-8.
func appendJSString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[r>>4])
				b.WriteByte(hex[r&15])
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
