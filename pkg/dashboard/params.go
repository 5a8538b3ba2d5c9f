package dashboard

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkParams says what is wrong with r's parameters, the query string's
// and, for a POST, the form's; nil when nothing is. A query string or a
// form that does not parse is wrong (r.FormValue would drop the pairs it
// cannot read, and a page or an action would go on without that filter),
// and so is a value with a NUL byte, which PostgreSQL text cannot hold, or
// one that is not UTF-8, which the server refuses: every value is checked,
// whether or not it goes to SQL.
func checkParams(r *http.Request) error {
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		return fmt.Errorf("query string: %v", err)
	}
	// The query string parses, so an error is the form's (its body's).
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("form: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Form)) {
		for _, v := range r.Form[k] {
			switch {
			case strings.IndexByte(v, 0) >= 0:
				return fmt.Errorf("%s: a NUL byte (PostgreSQL text cannot hold one)", paramName(k))
			case !utf8.ValidString(v):
				return fmt.Errorf("%s: not valid UTF-8", paramName(k))
			}
		}
	}
	return nil
}

// paramName is a parameter's name as an error names it: quoted when it is
// not plain printable text.
func paramName(k string) string {
	if k != "" && utf8.ValidString(k) && strings.IndexFunc(k, func(c rune) bool { return !unicode.IsPrint(c) }) < 0 {
		return k
	}
	return strconv.Quote(k)
}

// paramsOK answers 400 saying what is wrong with r's parameters
// (checkParams), and returns false, when something is.
func (d *Dashboard) paramsOK(w http.ResponseWriter, r *http.Request) bool {
	if err := checkParams(r); err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}
