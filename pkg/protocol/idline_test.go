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
	}{{"hello token", true, true}, {"hello token trace", true, true}, {"hello trace", true, false}, {"hello", true, false}, {"hello  token", true, true}, {"hello world", false, false}, {"hello token later", false, false}, {"0", false, false}, {"0 # hello", false, false}} {
		h, ok := ParseHello([]byte(c.line))
		if ok != c.hello || h.Token != c.tk {
			t.Errorf("ParseHello(%q) = %+v, %v", c.line, h, ok)
		}
	}
}

func TestParseIDTrace(t *testing.T) {
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, c := range []struct {
		line string
		want IDLine
	}{{"42 7 " + tp, IDLine{42, 7, tp}}, {"42 " + tp, IDLine{42, 0, tp}}, {"42 7", IDLine{42, 7, ""}}} {
		got, err := ParseID([]byte(c.line))
		if err != nil || got != c.want {
			t.Errorf("ParseID(%q) = %+v, %v; want %+v", c.line, got, err, c.want)
		}
	}
	for _, bad := range []string{tp, "42 7 8 " + tp, "x " + tp} {
		if _, err := ParseID([]byte(bad)); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}
