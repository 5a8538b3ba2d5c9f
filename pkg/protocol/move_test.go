package protocol

import (
	"strings"
	"testing"
)

func TestMoves(t *testing.T) {
	for _, tc := range []struct {
		line  string
		move  Move
		next  string
		delay float64
		err   string
	}{
		{"0 next:enrich", Advance, "enrich", 0, ""},
		{"0 a=0.5 next:b.c-d # fused then advanced", Advance, "b.c-d", 0, ""},
		{"0 done", Finish, "", 0, ""},
		{"0 pause:2.5", Pause, "", 2.5, ""},
		{"0 pause:0", Pause, "", 0, ""},
		{"0 next:", 0, "", 0, "bad stage name"},
		{"0 next:a/b", 0, "", 0, "bad stage name"},
		{"0 next:" + strings.Repeat("s", 63), Advance, strings.Repeat("s", 63), 0, ""},
		{"0 next:" + strings.Repeat("s", 64), 0, "", 0, "bad stage name in \"next:" + strings.Repeat("s", 64) + "\" (want at most 63 bytes, not 64)"},
		{"0 pause:-1", 0, "", 0, "bad seconds"},
		{"0 pause:soon", 0, "", 0, "bad seconds"},
		{"0 done done", 0, "", 0, "second transition"},
		{"0 next:a pause:1", 0, "", 0, "second transition"},
		{"0 Done", 0, "", 0, "unknown token"},
	} {
		st, err := Parse([]byte(tc.line))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || st.Move != tc.move || st.Next != tc.next || st.Delay != tc.delay {
			t.Errorf("%q: %+v %v", tc.line, st, err)
			continue
		}
		back, err := Parse([]byte(strings.TrimSuffix(string(Append(nil, st)), "\n")))
		if err != nil || back.Move != st.Move || back.Next != st.Next || back.Delay != st.Delay {
			t.Errorf("%q: Append round trip gave %+v %v", tc.line, back, err)
		}
	}
}
