package protocol

import "testing"

func TestIDLine(t *testing.T) {
	for _, c := range []struct {
		id, token int64
		line      string
	}{{42, 0, "42\n"}, {42, 1<<40 + 7, "42 1099511627783\n"}} {
		if got := string(AppendIDLine(nil, c.id, c.token)); got != c.line {
			t.Errorf("AppendIDLine(%d, %d) = %q, want %q", c.id, c.token, got, c.line)
		}
		id, token, err := ParseIDLine([]byte(c.line[:len(c.line)-1]))
		if err != nil || id != c.id || token != c.token {
			t.Errorf("ParseIDLine(%q) = %d, %d, %v", c.line, id, token, err)
		}
	}
	for _, bad := range []string{"", "x", "42 x", "42 0", "0", "-1 5", "1 2 3"} {
		if _, _, err := ParseIDLine([]byte(bad)); err == nil {
			t.Errorf("ParseIDLine(%q) accepted", bad)
		}
	}
}

func TestParseHello(t *testing.T) {
	for _, c := range []struct {
		line      string
		hello, tk bool
	}{{"hello token", true, true}, {"hello", true, false}, {"hello  token", true, true}, {"hello world", false, false}, {"hello token later", false, false}, {"0", false, false}, {"0 # hello", false, false}} {
		h, ok := ParseHello([]byte(c.line))
		if ok != c.hello || h.Token != c.tk {
			t.Errorf("ParseHello(%q) = %+v, %v", c.line, h, ok)
		}
	}
}
