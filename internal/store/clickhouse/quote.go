package clickhouse

import (
	"strconv"
	"strings"
	"time"
)

// ClickHouse 18.16 has no query parameters ({name:Type} came in 19.x), so
// values go into queries as literals. Every value from outside passes
// through one of these functions; nothing is concatenated raw.

// quoteString returns s as a ClickHouse string literal. Backslash and
// quote are escaped, and every control byte is written as \xHH so that the
// query text stays one printable line whatever s holds. Other bytes,
// including invalid UTF-8, pass through unchanged: ClickHouse strings are
// bytes.
func quoteString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			const hex = "0123456789abcdef"
			b.WriteString(`\x`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// quoteStrings returns the values as a parenthesised list for IN.
func quoteStrings(ss []string) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, s := range ss {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteString(s))
	}
	b.WriteByte(')')
	return b.String()
}

// quoteInt returns n as a literal. A negative number is parenthesised:
// "-1" after a minus in the query would otherwise read as "--", a comment.
func quoteInt(n int64) string {
	if n < 0 {
		return "(" + strconv.FormatInt(n, 10) + ")"
	}
	return strconv.FormatInt(n, 10)
}

// quoteIdent returns name as a back-quoted identifier.
func quoteIdent(name string) string {
	return "`" + strings.NewReplacer(`\`, `\\`, "`", "\\`").Replace(name) + "`"
}

// quoteDay returns a Date (days since 1970) as a literal: a string, which
// ClickHouse compares with a Date column as that date. A number is refused
// in a comparison with a Date on 18.16.
func quoteDay(d uint16) string {
	return "'" + time.Unix(int64(d)*86400, 0).UTC().Format(time.DateOnly) + "'"
}
