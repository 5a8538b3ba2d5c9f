package config

import (
	"errors"
	"strings"
)

// splitWords splits a PROGRAM value into words the way a POSIX shell splits
// a simple command, but without running a shell: there is no expansion of
// any kind ($VAR, ~, globs, `…`), no redirection and no operators.
//
//   - Blanks (space, tab, newline, CR) separate words.
//   - '…' is literal; "…" is literal except that \" \\ \$ \` stand for the
//     second character and backslash-newline disappears; elsewhere a
//     backslash takes the next character literally. Quoted parts join the
//     word around them, and an empty pair of quotes makes an empty word.
//   - An unquoted '#' or ';' that begins a word starts a comment that runs to
//     the end of the value (like '#' in a shell, and like the ' ;' inline
//     comments of the other keys).
//
// It returns the words and the offset at which the comment begins (len(s)
// when there is none). An unterminated quote or a trailing backslash is an
// error.
func splitWords(s string) (words []string, end int, err error) {
	var word strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			flush()
			i++
		case (c == '#' || c == ';') && !inWord:
			return words, i, nil
		case c == '\\':
			if i+1 == len(s) {
				return nil, 0, errors.New("trailing backslash (lines cannot be continued)")
			}
			if s[i+1] != '\n' {
				word.WriteByte(s[i+1])
				inWord = true
			}
			i += 2
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, 0, errors.New("unterminated ' quote")
			}
			word.WriteString(s[i+1 : i+1+j])
			inWord = true
			i += j + 2
		case c == '"':
			inWord = true
			i++
			for {
				if i == len(s) {
					return nil, 0, errors.New(`unterminated " quote`)
				}
				c := s[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					if s[i+1] != '\n' {
						word.WriteByte(s[i+1])
					}
					i += 2
					continue
				}
				word.WriteByte(c)
				i++
			}
		default:
			word.WriteByte(c)
			inWord = true
			i++
		}
	}
	flush()
	return words, len(s), nil
}
