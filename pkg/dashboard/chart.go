package dashboard

import (
	"fmt"
	"html/template"
	"strings"
)

// The throughput chart: a small inline SVG of stacked bars, passes that
// succeeded below, failed ones above, drawn on the server (no script, no
// image request). Only numbers and times go into it.

const (
	chartBar    = 8  // bar width, px
	chartGap    = 2  // between bars
	chartHeight = 32 // px
)

// chartSVG draws bins; a bar's title says its time and rates.
func chartSVG(bins []bin) template.HTML {
	top := 0.0
	for _, b := range bins {
		top = max(top, b.OK+b.Failed)
	}
	width := len(bins)*(chartBar+chartGap) - chartGap
	var sb strings.Builder
	last := "no data yet"
	if n := len(bins); n > 0 && bins[n-1].Known {
		last = rate(bins[n-1].OK+bins[n-1].Failed) + " in the last bar"
	}
	fmt.Fprintf(&sb, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="throughput, %s">`,
		width, chartHeight, width, chartHeight, last)
	fmt.Fprintf(&sb, `<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#ccc" stroke-width="1"/>`, chartHeight-1, width, chartHeight-1)
	for i, b := range bins {
		x := i * (chartBar + chartGap)
		span := b.Start.UTC().Format("15:04:05") + "–" + b.End.UTC().Format("15:04:05 UTC")
		if !b.Known {
			fmt.Fprintf(&sb, `<g><title>%s: not sampled</title><rect x="%d" y="%d" width="%d" height="1" fill="#ddd"/></g>`,
				span, x, chartHeight-1, chartBar)
			continue
		}
		okH, failH := barHeight(b.OK, top), barHeight(b.Failed, top)
		fmt.Fprintf(&sb, `<g class="bar"><title>%s: %s ok, %s failed</title>`, span, rate(b.OK), rate(b.Failed))
		fmt.Fprintf(&sb, `<rect x="%d" y="0" width="%d" height="%d" fill="transparent"/>`, x, chartBar, chartHeight)
		if okH > 0 {
			fmt.Fprintf(&sb, `<rect class="ok" x="%d" y="%.1f" width="%d" height="%.1f" fill="#2e8540"/>`, x, float64(chartHeight)-okH, chartBar, okH)
		}
		if failH > 0 {
			fmt.Fprintf(&sb, `<rect class="failed" x="%d" y="%.1f" width="%d" height="%.1f" fill="#c0392b"/>`, x, float64(chartHeight)-okH-failH, chartBar, failH)
		}
		sb.WriteString(`</g>`)
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String()) //nolint:gosec // numbers and times only
}

// barHeight scales v against top; anything above zero is at least 1 px.
func barHeight(v, top float64) float64 {
	if v <= 0 || top <= 0 {
		return 0
	}
	return max(v/top*float64(chartHeight-1), 1)
}
