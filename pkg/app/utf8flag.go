package app

import "unicode/utf8"

// checkUTF8 refuses a flag's text that is not UTF-8: the database takes
// text as UTF-8 only, and would refuse it with its own error (SQLSTATE
// 22021), and a header is JSON, whose encoder would have put U+FFFD in
// place of each bad byte without a word.
func checkUTF8(flag, v string) error {
	if !utf8.ValidString(v) {
		return usage("--%s %q: not UTF-8 text", flag, v)
	}
	return nil
}
