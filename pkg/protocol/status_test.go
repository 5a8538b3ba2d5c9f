package protocol

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// maxErrLen bounds an error message: it goes into dispatch_error (a text
// column) and a log line.
const maxErrLen = 300

// checkErr fails unless err is fit for a text column and a log line.
func checkErr(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if !utf8.ValidString(msg) {
		t.Errorf("error is not valid UTF-8: %q", msg)
	}
	if strings.IndexByte(msg, 0) >= 0 {
		t.Errorf("error contains a NUL byte: %q", msg)
	}
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("error is more than one line: %q", msg)
	}
	if len(msg) > maxErrLen {
		t.Errorf("error is %d bytes, want at most %d: %q", len(msg), maxErrLen, msg)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Status
	}{
		{"zero", "0", Status{}},
		{"code", "7", Status{Code: 7}},
		{"trailing CR", "0\r", Status{}}, // the reader strips it; Parse copes anyway
		{"text CR", "3 # oops\r", Status{Code: 3, Text: "oops"}},
		{"nine digits", "123456789", Status{Code: 123456789}},
		{"leading zeros", "007", Status{Code: 7}},
		{"text", "7 # some text", Status{Code: 7, Text: "some text"}},
		{"text no blank after #", "7 #some text", Status{Code: 7, Text: "some text"}},
		{"empty text", "0 #", Status{}},
		{"blank text", "0 #   \t ", Status{}},
		{"fused", "0 enrich=0.25 deliver=1.5", Status{Fused: []Fused{{"enrich", 0.25}, {"deliver", 1.5}}}},
		{"fused integer", "0 a=3", Status{Fused: []Fused{{"a", 3}}}},
		{"fused zero", "0 a=0", Status{Fused: []Fused{{"a", 0}}}},
		{"fused exponent", "0 a=1e-3", Status{Fused: []Fused{{"a", 0.001}}}},
		{"fused max", "0 a=1e9", Status{Fused: []Fused{{"a", 1e9}}}},
		{"fused stage chars", "0 A_b-c.9=2", Status{Fused: []Fused{{"A_b-c.9", 2}}}},
		{"fused repeated", "0 a=1 a=2", Status{Fused: []Fused{{"a", 1}, {"a", 2}}}},
		{"fused and text", "2 a=1 # failed", Status{Code: 2, Fused: []Fused{{"a", 1}}, Text: "failed"}},
		{"text keeps later #", "0 a=1 # t # u", Status{Fused: []Fused{{"a", 1}}, Text: "t # u"}},
		{"text keeps #s", "0 ## x#y", Status{Text: "# x#y"}},
		{"text after tab", "0\t# t", Status{Text: "t"}},
		{"text keeps inner blanks", "0 #  a \t b  ", Status{Text: "a \t b"}},
		{"leading and trailing blanks", "  0  a=1  ", Status{Fused: []Fused{{"a", 1}}}},
		{"tabs", "\t0\ta=1\t#\tt\t", Status{Fused: []Fused{{"a", 1}}, Text: "t"}},
		// Tokens are split on Unicode white space (bytes.Fields); a '#' after
		// any of it starts the text, as after a blank.
		{"other white space", "0\va=1\u00a0b=2\u2028", Status{Fused: []Fused{{"a", 1}, {"b", 2}}}},
		{"# after NBSP", "1\u00a0# failed", Status{Code: 1, Text: "failed"}},
		{"# after VT", "1\v#failed", Status{Code: 1, Text: "failed"}},
		{"text with controls", "1 # a\x01b", Status{Code: 1, Text: "a\x01b"}},
		{"text UTF-8", "1 # échec ✗", Status{Code: 1, Text: "échec ✗"}},
		{"text invalid UTF-8", "1 # a\xffb\xc3", Status{Code: 1, Text: "a\uFFFDb\uFFFD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.line))
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.line, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q) = %+v, want %+v", tt.line, got, tt.want)
			}
			if !utf8.ValidString(got.Text) {
				t.Errorf("Parse(%q).Text is not valid UTF-8: %q", tt.line, got.Text)
			}
		})
	}
}

func TestParseError(t *testing.T) {
	tests := []struct {
		name string
		line string
		want []string // substrings of the error message
	}{
		{"empty", "", []string{"no code"}},
		{"blank", " \t ", []string{"no code"}},
		{"only text", "# t", []string{"no code", `"# t"`}},
		{"letters", "abc", []string{"decimal code", `"abc"`}},
		{"negative", "-1", []string{"decimal code", `"-1"`}},
		{"plus", "+1", []string{"decimal code"}},
		{"too many digits", "1234567890", []string{"decimal code", `"1234567890"`}},
		{"hex", "0x1", []string{"decimal code"}},
		{"# glued to code", "0#x", []string{"decimal code", `"0#x"`}},
		{"# glued to token", "0 a=1#x", []string{"bad seconds", `"a=1#x"`}},
		{"code after fused", "a=1 0", []string{"decimal code"}},
		{"bad seconds", "0 x=abc", []string{"bad seconds", `"x=abc"`, `"0 x=abc"`}},
		{"negative seconds", "0 x=-1", []string{"bad seconds", `"x=-1"`}},
		{"NaN", "0 x=NaN", []string{"bad seconds", `"x=NaN"`}},
		{"nan", "0 x=nan", []string{"bad seconds"}},
		{"Inf", "0 x=Inf", []string{"bad seconds", `"x=Inf"`}},
		{"+Inf", "0 x=+Inf", []string{"bad seconds"}},
		{"-Inf", "0 x=-Inf", []string{"bad seconds"}},
		{"infinity", "0 x=infinity", []string{"bad seconds"}},
		{"out of range", "0 x=1e400", []string{"bad seconds"}},
		{"over a billion", "0 x=1000000001", []string{"bad seconds"}},
		{"empty seconds", "0 x=", []string{"bad seconds", `"x="`}},
		{"two =", "0 x=1=2", []string{"bad seconds"}},
		{"bad stage name", "0 bad/name=1", []string{"unknown token", `"bad/name=1"`}},
		{"empty stage name", "0 =1", []string{"unknown token", `"=1"`}},
		{"long stage name", "0 " + strings.Repeat("s", 64) + "=1", []string{"unknown token"}},
		{"bare word", "0 foo", []string{"unknown token", `"foo"`, `"0 foo"`}},
		{"lone #", "0 a#b", []string{"unknown token", `"a#b"`}},
		{"# after invalid UTF-8", "0 \xc2# t", []string{"unknown token", "\"\uFFFD#\""}},
		{"NUL in code", "0\x00", []string{"NUL", `"0\x00"`}},
		{"NUL in text", "0 # a\x00b", []string{"NUL"}},
		{"NUL alone", "\x00", []string{"NUL"}},
		{"invalid UTF-8 in code", "0\xff", []string{"decimal code"}},
		{"invalid UTF-8 in token", "0 \xfe=1", []string{"unknown token"}},
		{"invalid UTF-8 in seconds", "0 a=1\xc3", []string{"bad seconds"}},
		{"too long", "0 # " + strings.Repeat("x", MaxLine+1-4), []string{"longer than 65536 bytes"}},
		{"too long blanks", strings.Repeat(" ", MaxLine+1), []string{"longer than"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Parse([]byte(tt.line))
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", tt.line, st)
			}
			checkErr(t, err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) error %q does not contain %q", tt.line, err, w)
				}
			}
		})
	}
}

// TestParseErrorBounded feeds lines whose quoted form is as long as it gets:
// every byte escaped, in the token and in the line.
func TestParseErrorBounded(t *testing.T) {
	long := func(s string) string { return strings.Repeat(s, 200) }
	lines := []string{
		long("\x01"),                  // code: \x01 per byte
		"0 a=" + long("\x01"),         // bad seconds: token and line
		"0 " + long("\x01"),           // unknown token
		"0 " + long("\xff"),           // invalid UTF-8 in a token
		"0 a=" + long("\xff"),         // invalid UTF-8 in seconds
		"0 " + long("\u200b"),         // 3-byte rune escaped as \u200b
		"0 " + long("\u00ad"),         // 2-byte rune escaped as \u00ad
		"0 " + long("\U000E0001"),     // 4-byte rune escaped as \U000e0001
		"0 " + long("\"\\"),           // escaped quotes and backslashes
		"0 a=" + long("\U000E0001"),   // both quotes at their longest
		long("\x00"),                  // NUL
		"0 a=1 " + long("x") + "\x00", // NUL late in the line
		"0 " + long("é"),              // printable multibyte
		"0\x01 # " + long("\x01"),     // text not quoted twice
	}
	for _, line := range lines {
		_, err := Parse([]byte(line))
		if err == nil {
			t.Errorf("Parse(%q): no error", line)
			continue
		}
		checkErr(t, err)
	}
}

func TestParseNonUTF8Text(t *testing.T) {
	for _, line := range []string{"1 # \xff", "1 # \xc3\xa9\xc3", "1 #\xed\xa0\x80", "1 # a\x80\x80b"} {
		st, err := Parse([]byte(line))
		if err != nil {
			t.Fatalf("Parse(%q): %v", line, err)
		}
		if !utf8.ValidString(st.Text) || st.Text == "" {
			t.Errorf("Parse(%q).Text = %q, want valid, non-empty UTF-8", line, st.Text)
		}
	}
}

func TestParseMaxLine(t *testing.T) {
	pad := func(prefix string, n int) []byte {
		return []byte(prefix + strings.Repeat("x", n-len(prefix)))
	}
	line := pad("0 # ", MaxLine)
	if len(line) != MaxLine {
		t.Fatalf("len = %d", len(line))
	}
	st, err := Parse(line)
	if err != nil {
		t.Fatalf("Parse of a %d-byte line: %v", len(line), err)
	}
	if st.Code != 0 || len(st.Text) != MaxLine-4 {
		t.Errorf("Parse of a %d-byte line: code %d, text %d bytes", len(line), st.Code, len(st.Text))
	}

	// Exactly MaxLine, trailing blanks: accepted, blanks trimmed.
	line = append([]byte("5"), bytes.Repeat([]byte(" "), MaxLine-1)...)
	if st, err := Parse(line); err != nil || st.Code != 5 {
		t.Errorf("Parse(5 + blanks to %d bytes) = %+v, %v", len(line), st, err)
	}

	// One more byte is too long, however well formed.
	line = pad("0 # ", MaxLine+1)
	if _, err := Parse(line); err == nil {
		t.Errorf("Parse of a %d-byte line: no error", len(line))
	} else {
		checkErr(t, err)
	}
}

func TestParseDoesNotAlias(t *testing.T) {
	line := []byte("1 stage=2 # text")
	st, err := Parse(line)
	if err != nil {
		t.Fatal(err)
	}
	for i := range line {
		line[i] = 'z'
	}
	want := Status{Code: 1, Fused: []Fused{{"stage", 2}}, Text: "text"}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("after the line buffer is reused, Status = %+v, want %+v", st, want)
	}
}

func TestAppendRoundTrip(t *testing.T) {
	tests := []Status{
		{},
		{Code: 7},
		{Code: 999999999},
		{Code: 1, Text: "some text"},
		{Code: 1, Text: "t # u"},
		{Code: 1, Text: "# leading hash"},
		{Code: 0, Fused: []Fused{{"enrich", 0.25}, {"deliver", 1.5}}},
		{Code: 0, Fused: []Fused{{"a", 0}, {"b", 1e9}, {"c", 1e-9}, {"d", math.SmallestNonzeroFloat64}}},
		{Code: 0, Fused: []Fused{{"a", 0.1}, {"b", 1.0 / 3}, {"c", 123456.789}}},
		{Code: 3, Fused: []Fused{{"x.y-z_0", 2}}, Text: "échec ✗"},
		{Code: 3, Fused: []Fused{{strings.Repeat("s", 63), 2}}},
	}
	for _, st := range tests {
		line := Append(nil, st)
		if n := bytes.Count(line, []byte("\n")); n != 1 || line[len(line)-1] != '\n' {
			t.Errorf("Append(%+v) = %q: want one line ending in a newline", st, line)
			continue
		}
		got, err := Parse(line[:len(line)-1])
		if err != nil {
			t.Errorf("Parse(Append(%+v)) = %q: %v", st, line, err)
			continue
		}
		if !reflect.DeepEqual(got, st) {
			t.Errorf("Parse(Append(%+v)) = %+v (line %q)", st, got, line)
		}
	}
}

func TestAppendKeepsDst(t *testing.T) {
	dst := []byte("1\n")
	dst = Append(dst, Status{Code: 2})
	if string(dst) != "1\n2\n" {
		t.Errorf("Append to a buffer = %q", dst)
	}
}

// TestAppendText checks that whatever the text, Append writes one line that
// Parse accepts: a worker passes an arbitrary error message as the text.
func TestAppendText(t *testing.T) {
	tests := []struct {
		text string
		want string // Text after Parse
	}{
		{"a\nb", "a b"},
		{"a\n\nb\n", "a  b"},
		{"\n", ""},
		{"a\r\nb", "a\r b"},
		{"a\x00b", "a b"},
		{"  padded  ", "padded"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{strings.Repeat("é", MaxLine), ""}, // too long: cut, see below
	}
	for _, tt := range tests {
		st := Status{Code: 1, Fused: []Fused{{"s", 1}}, Text: tt.text}
		line := Append(nil, st)
		if n := bytes.Count(line, []byte("\n")); n != 1 || line[len(line)-1] != '\n' {
			t.Errorf("Append(text %.40q) = %.80q: want one line ending in a newline", tt.text, line)
			continue
		}
		got, err := Parse(line[:len(line)-1])
		if err != nil {
			t.Errorf("Parse(Append(text %.40q)) = %.80q: %v", tt.text, line, err)
			continue
		}
		if got.Code != 1 || !reflect.DeepEqual(got.Fused, st.Fused) {
			t.Errorf("Parse(Append(text %.40q)) = %+v", tt.text, got)
		}
		if len(tt.text) > MaxLine {
			if len(line)-1 > MaxLine || !strings.HasPrefix(tt.text, got.Text) || len(got.Text) < MaxLine/2 {
				t.Errorf("Append of a %d-byte text: line %d bytes, text %d bytes", len(tt.text), len(line), len(got.Text))
			}
			continue
		}
		if got.Text != tt.want {
			t.Errorf("Parse(Append(text %q)).Text = %q, want %q", tt.text, got.Text, tt.want)
		}
	}
}

func TestCheckStage(t *testing.T) {
	chars := "want letters, digits, '_', '-' or '.'"
	tests := []struct {
		s    string
		want string // the error; "" for none
	}{
		{"enrich", ""},
		{"a", ""},
		{"A-Z_a.z-0.9", ""},
		{"0", ""},
		{"v1.2", ""},
		{"-", ""},
		{".", ""},
		{strings.Repeat("s", 63), ""},
		{strings.Repeat("s", 64), "want at most 63 bytes, not 64"},
		{strings.Repeat("s", 70), "want at most 63 bytes, not 70"},
		{strings.Repeat("s", 63) + "/", chars},
		{"", chars},
		{"a/b", chars},
		{"a b", chars},
		{"a=b", chars},
		{"a#", chars},
		{"a:b", chars},
		{"a]", chars},
		{"é", chars},
		{"*", chars},
		{"a\x00", chars},
		{"a\n", chars},
		{"\xff", chars},
	}
	for _, tt := range tests {
		err, got := CheckStage(tt.s), ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("CheckStage(%q) = %v, want %q", tt.s, err, tt.want)
		}
		if validStage(tt.s) != (err == nil) || validStage([]byte(tt.s)) != (err == nil) {
			t.Errorf("validStage(%q) disagrees with CheckStage", tt.s)
		}
	}
}

func TestQuote(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"abc", `"abc"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"a\x00b\tc\n", `"a\x00b\tc\n"`},
		{"é✗", `"é✗"`},
		{"a\xffb", "\"a\uFFFDb\""},
		{strings.Repeat("x", 120), `"` + strings.Repeat("x", 120) + `"`},
		{strings.Repeat("x", 121), `"` + strings.Repeat("x", 120) + `"…`},
		{strings.Repeat("x", 5000), `"` + strings.Repeat("x", 120) + `"…`},
		{strings.Repeat("é", 60), `"` + strings.Repeat("é", 60) + `"`},
		{strings.Repeat("é", 61), `"` + strings.Repeat("é", 60) + `"…`},
		{strings.Repeat("x", 119) + "é", `"` + strings.Repeat("x", 119) + `"…`}, // no half rune
		{strings.Repeat("\x01", 30), `"` + strings.Repeat(`\x01`, 30) + `"`},
		{strings.Repeat("\x01", 31), `"` + strings.Repeat(`\x01`, 30) + `"…`}, // no half escape
	}
	for _, tt := range tests {
		got := Quote([]byte(tt.in))
		if got != tt.want {
			t.Errorf("Quote(%.40q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestQuoteBounded checks that Quote is printable, valid UTF-8 and short
// whatever it is given.
func TestQuoteBounded(t *testing.T) {
	for _, in := range []string{
		strings.Repeat("\x00", 1000),
		strings.Repeat("\xff", 1000),
		strings.Repeat("\u2028", 1000),
		strings.Repeat("\U000E0001", 1000),
		strings.Repeat("\U0001F600", 1000),
		strings.Repeat(`"`, 1000),
		strings.Repeat("é\xc3", 1000),
	} {
		got := Quote([]byte(in))
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 || strings.ContainsAny(got, "\r\n") {
			t.Errorf("Quote(%.20q) = %.40q: not printable", in, got)
		}
		if len(got) > 125 {
			t.Errorf("Quote(%.20q) is %d bytes, want at most 125", in, len(got))
		}
		if !strings.HasSuffix(got, `"…`) {
			t.Errorf("Quote(%.20q) = %.40q: not marked as cut", in, got)
		}
	}
}
