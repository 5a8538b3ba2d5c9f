package config

import (
	"fmt"
	"regexp"
	"strings"
)

// headerNameRE is what KEY = header:NAME takes as NAME: a header's name,
// without spaces or control characters.
var headerNameRE = regexp.MustCompile(`^[^\s\x00-\x1f\x7f]{1,255}$`)

// Keyed reports whether the stage has a KEY: at most KeyLimit messages of
// one key in flight there.
func (st *Stage) Keyed() bool { return st.KeyHeader != "" }

// setKey parses KEY = header:NAME into st.KeyHeader, or says what is wrong.
func setKey(st *Stage, key, v string) string {
	kind, name, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(kind) != "header" {
		return fmt.Sprintf("%s: bad key %q (want header:NAME, such as header:customer)", key, v)
	}
	name = strings.TrimSpace(name)
	if !headerNameRE.MatchString(name) {
		return fmt.Sprintf("%s: bad header name %q in %q (want a header's name: no spaces, at most 255 bytes)", key, name, v)
	}
	st.KeyHeader = name
	return ""
}
