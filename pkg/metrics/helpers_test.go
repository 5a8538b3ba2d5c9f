package metrics

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// families is one scrape, parsed.
type families map[string]*dto.MetricFamily

// scrape fetches and parses base/metrics with the Prometheus text parser.
func scrape(t testing.TB, base string) families {
	t.Helper()
	code, body := testkit.Get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET %s/metrics: %d\n%s", base, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse %s/metrics: %v\n%s", base, err, body)
	}
	return fams
}

// labelsOf returns a metric's labels as name=value pairs.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// find returns the sample of family name whose labels include labels
// (name, value pairs), or nil.
func (f families) find(name string, labels ...string) *dto.Metric {
	fam := f[name]
	if fam == nil {
		return nil
	}
next:
	for _, m := range fam.GetMetric() {
		ls := labelsOf(m)
		for i := 0; i < len(labels); i += 2 {
			if ls[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return m
	}
	return nil
}

// value returns the value of a counter, gauge or untyped sample; -1 when
// there is none.
func (f families) value(name string, labels ...string) float64 {
	m := f.find(name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return -1
}

// sum adds every sample of a counter or gauge family.
func (f families) sum(name string) float64 {
	total := 0.0
	for _, m := range f[name].GetMetric() {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}

// names lists the families, for error messages.
func (f families) names() string {
	var out []string
	for n := range f {
		out = append(out, n)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// ctx returns a context for one test statement.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
