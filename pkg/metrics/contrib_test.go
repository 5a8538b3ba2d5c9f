package metrics

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// descNames returns the names of the families c describes.
func descNames(c prometheus.Collector) map[string]bool {
	ch := make(chan *prometheus.Desc, 100)
	go func() { c.Describe(ch); close(ch) }()
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	for d := range ch {
		if m := re.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// TestContribRules: every series contrib/prometheus/pepsi.rules.yml names
// exists, in the source its group is for: group pepsi-dispatch in the
// dispatcher's metrics, pepsi-stats in the exporter's (pepsi httpd, pepsi
// stats --format prometheus), pepsi in both.
func TestContribRules(t *testing.T) {
	m := NewObserver(ObserverOptions{Stages: []string{"s"}})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	dispatcher := descNames(newDepthCollector(nil, nil, false, 0, nil))
	for _, f := range fams {
		dispatcher[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				dispatcher[f.GetName()+s] = true
			}
		}
	}
	stats := descNames(NewStats(StatsOptions{}))
	sources := map[string][]map[string]bool{
		"pepsi":          {dispatcher, stats},
		"pepsi-dispatch": {dispatcher},
		"pepsi-stats":    {stats},
	}

	data, err := os.ReadFile("../../contrib/prometheus/pepsi.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	groupRE := regexp.MustCompile(`^  - name: (\S+)`)
	nameRE := regexp.MustCompile(`\bpepsi_[a-z0-9_]+`)
	group := ""
	seen := map[string]bool{}
	for i, line := range strings.Split(string(data), "\n") {
		if m := groupRE.FindStringSubmatch(line); m != nil {
			group = m[1]
			seen[group] = true
			if sources[group] == nil {
				t.Errorf("pepsi.rules.yml:%d: unknown group %s", i+1, group)
			}
			continue
		}
		if group == "" {
			continue
		}
		for _, name := range nameRE.FindAllString(line, -1) {
			for _, src := range sources[group] {
				if !src[name] {
					t.Errorf("pepsi.rules.yml:%d: group %s uses %s, which its source does not export", i+1, group, name)
				}
			}
		}
	}
	for g := range sources {
		if !seen[g] {
			t.Errorf("pepsi.rules.yml: no group %s", g)
		}
	}
}
