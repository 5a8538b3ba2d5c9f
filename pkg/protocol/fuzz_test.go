package protocol

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks, for any line:
//   - Parse does not panic;
//   - an error is valid UTF-8, one line without NUL, and short;
//   - a Status it returns is well formed, and Append writes it as one line
//     that Parse reads back as the same Code, Fused and Text;
//   - Append of the line taken as free text writes one line that Parse
//     accepts, with the text intact.
//
// The seed corpus is in testdata/fuzz/FuzzParse as well as here.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"0",
		"0\r",
		"7 # some text",
		"0 enrich=0.25 deliver=1.5",
		"0 a=1 # t # u",
		"0#x",
		"  0\ta=1  #\tt  ",
		"",
		"abc",
		"-1",
		"1234567890",
		"0 x=abc",
		"0 x=-1",
		"0 x=NaN",
		"0 x=Inf",
		"0 x=1e-300",
		"0 x=0x1p-2",
		"0 bad/name=1",
		"0 foo",
		"0\x00",
		"1 # \xff\xfe",
		"0 \xff=1",
		"1\u00a0# t",
		"0 " + strings.Repeat("\x01", 200),
		"0 # a\nb",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		orig := bytes.Clone(line)
		st, err := Parse(line)
		if !bytes.Equal(line, orig) {
			t.Fatalf("Parse modified its input")
		}
		if err != nil {
			checkErr(t, err)
		} else {
			checkStatus(t, line, st)
			checkRoundTrip(t, line, st)
		}
		checkAppendText(t, string(line))
	})
}

// checkStatus checks that st, parsed from line, is well formed.
func checkStatus(t *testing.T, line []byte, st Status) {
	t.Helper()
	if st.Code < 0 || st.Code > 999999999 {
		t.Errorf("Parse(%q).Code = %d", line, st.Code)
	}
	for _, fu := range st.Fused {
		if CheckStage(fu.Stage) != nil || math.IsNaN(fu.Seconds) || fu.Seconds < 0 || fu.Seconds > 1e9 {
			t.Errorf("Parse(%q) fused %+v", line, fu)
		}
	}
	if !utf8.ValidString(st.Text) || strings.TrimSpace(st.Text) != st.Text || strings.IndexByte(st.Text, 0) >= 0 {
		t.Errorf("Parse(%q).Text = %q: not trimmed valid UTF-8", line, st.Text)
	}
}

// checkRoundTrip checks that Parse(Append(st)) gives st back.
func checkRoundTrip(t *testing.T, line []byte, st Status) {
	t.Helper()
	out := Append(nil, st)
	if bytes.IndexByte(out, '\n') != len(out)-1 {
		t.Fatalf("Append(Parse(%q)) = %q: not one line", line, out)
	}
	out = out[:len(out)-1]
	if len(out) > MaxLine && st.Text == "" {
		// Seconds as tiny as 1e-300 are written out in full, which may
		// not fit; Parse never sees such a line from the real dispatcher
		// side, so there is nothing to compare.
		return
	}
	got, err := Parse(out)
	if err != nil {
		if len(out) > MaxLine {
			return // as above, with text cut to nothing
		}
		t.Fatalf("Parse(Append(Parse(%q))) = Parse(%q): %v", line, out, err)
	}
	if got.Code != st.Code || !reflect.DeepEqual(got.Fused, st.Fused) {
		t.Fatalf("Parse(Append(Parse(%q))) = %+v, want %+v", line, got, st)
	}
	// Append folds newlines in the text (Parse never sees one from the
	// dispatcher's reader, but may be given one).
	want := strings.TrimSpace(strings.ReplaceAll(st.Text, "\n", " "))
	if got.Text != want {
		// A text made longer by Parse (U+FFFD for a bad byte) may be cut
		// to fit MaxLine.
		if len(out) < MaxLine-utf8.UTFMax || !strings.HasPrefix(want, got.Text) {
			t.Fatalf("Parse(Append(Parse(%q))).Text = %q, want %q", line, got.Text, want)
		}
		return
	}
	if again := Append(nil, got); !bytes.Equal(again[:len(again)-1], out) {
		t.Fatalf("Append is not stable: %q, then %q", out, again)
	}
}

// checkAppendText checks that Append keeps any text on one line that Parse
// accepts.
func checkAppendText(t *testing.T, text string) {
	t.Helper()
	st := Status{Code: 1, Fused: []Fused{{"s", 0.5}}, Text: text}
	out := Append(nil, st)
	if bytes.IndexByte(out, '\n') != len(out)-1 {
		t.Fatalf("Append(text %q) = %q: not one line", text, out)
	}
	got, err := Parse(out[:len(out)-1])
	if err != nil {
		t.Fatalf("Parse(Append(text %q)): %v", text, err)
	}
	if got.Code != st.Code || !reflect.DeepEqual(got.Fused, st.Fused) {
		t.Fatalf("Parse(Append(text %q)) = %+v", text, got)
	}
	clean := strings.NewReplacer("\n", " ", "\x00", " ").Replace(text)
	want := strings.TrimSpace(strings.ToValidUTF8(clean, "\uFFFD"))
	if got.Text != want && (len(out)-1 < MaxLine-utf8.UTFMax || !strings.HasPrefix(want, got.Text)) {
		t.Fatalf("Parse(Append(text %q)).Text = %q, want %q", text, got.Text, want)
	}
}
