package trace

import "testing"

func TestParse(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	sc, ok := Parse(tp, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
	if !ok || !sc.IsSampled() || !sc.IsRemote() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		sc.SpanID().String() != "b7ad6b7169203331" || sc.TraceState().Get("congo") != "t61rcWkgMzE" {
		t.Fatalf("Parse(%q) = %v, %v", tp, sc, ok)
	}
	if got := Parent(sc); got != tp {
		t.Errorf("Parent = %q, want %q", got, tp)
	}
	if sc, ok := Parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "not a state"); !ok || sc.IsSampled() || sc.TraceState().Len() != 0 {
		t.Errorf("unsampled, bad tracestate: %v, %v", sc, ok)
	}
	if _, ok := Parse("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future", ""); !ok {
		t.Error("a later version with more fields is refused")
	}
	for _, bad := range []string{"", "00-xyz", tp + "-", "ff" + tp[2:], "00-00000000000000000000000000000000-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
		"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		if _, ok := Parse(bad, ""); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	tp2, ts := Split(tp + " k=v, l=w")
	if tp2 != tp || ts != "k=v, l=w" {
		t.Errorf("Split: %q, %q", tp2, ts)
	}
}
