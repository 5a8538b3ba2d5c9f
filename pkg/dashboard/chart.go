package dashboard

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"
)

// The throughput chart: a small inline SVG drawn on the server (no script,
// no image request), one per stage, all on one scale so that 400/s and
// 2 800/s look different: bars of the passes per second (ok below, failed
// stacked on them) up to the scale's top, a dashed line; under the axis, a
// lane with each bar's failed share of the passes, full at
// chartFullShare, so that 2 % shows, and under it a lane of the failed
// messages (those failed in the bar's span and failed still: a stage's
// own pepsi.fail() is an ok pass, and shows here alone) as a share of the
// bar's passes, full at chartFullShare or when no pass is known; ticks
// every 5 bars, each labelled with its time, and the scale's values on the
// left (issue 54: the charts were 180 × 50 px without a value on their
// axis). Only numbers and times go into it. The colours are the
// style sheet's (classes), with fills as a fallback.

const (
	chartGutter    = 44   // left of the bars: the scale's values, px
	chartBar       = 16   // bar width, px
	chartGap       = 3    // between bars
	chartHeight    = 60   // the bars' area, px
	chartLane      = 14   // the failed share's lane, px
	chartDeadLane  = 8    // the failed messages' lane, px
	chartLabels    = 13   // the tick labels' line, px
	chartRight     = 2    // right of the bars, px
	chartFullShare = 0.10 // a failed share that fills the lane
)

// niceTop rounds a chart's largest rate up to a round number (1, 1.5, 2,
// 3, 4, 5, 6 or 8 times a power of ten), the top of its scale; 0 when
// nothing passed.
func niceTop(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 3, 4, 5, 6, 8, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// chartTop is the top of the scale every chart of bins shares.
func chartTop(charts ...[]bin) float64 {
	top := 0.0
	for _, bins := range charts {
		for _, b := range bins {
			if b.Known {
				top = max(top, b.OK+b.Failed)
			}
		}
	}
	return niceTop(top)
}

// chartSVG draws bins on a scale up to top (passes per second; 0: nothing
// passed anywhere), over a window written as window ("15 min"); a bar's
// title says its time, rates and failed share. Left of the bars, the
// scale's values (its top, half of it, 0) and the lanes' full share; under
// them, the time of every fifth bar.
func chartSVG(bins []bin, top float64, window string) template.HTML {
	bars := len(bins)*(chartBar+chartGap) - chartGap
	width := chartGutter + bars + chartRight
	height := chartHeight + 1 + chartLane + chartDeadLane + chartLabels
	base := float64(chartHeight) + 0.5 // the axis
	var sb strings.Builder
	last := "no data yet"
	if n := len(bins); n > 0 && bins[n-1].Known {
		last = rate(bins[n-1].OK+bins[n-1].Failed) + " in the last bar"
	}
	fmt.Fprintf(&sb, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="throughput, %s; scale to %s">`,
		width, height, width, height, last, rate(top))
	// The scale: its top, dashed, and half of it, dotted, with their values.
	fmt.Fprintf(&sb, `<line class="top" x1="%d" y1="0.5" x2="%d" y2="0.5" stroke="#ccc" stroke-dasharray="2 2"/>`, chartGutter, chartGutter+bars)
	fmt.Fprintf(&sb, `<line class="top" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ccc" stroke-dasharray="1 3"/>`, chartGutter, base/2, chartGutter+bars, base/2)
	value := func(y float64, text string) {
		fmt.Fprintf(&sb, `<text class="value" x="%d" y="%.1f" font-size="10" fill="#646970" text-anchor="end" dominant-baseline="middle">%s</text>`, chartGutter-4, y, text)
	}
	if top > 0 {
		value(6, rate(top))
		value(base/2, rate(top/2))
	}
	value(base-4, "0")
	fmt.Fprintf(&sb, `<text class="value" x="%d" y="%.1f" font-size="9" fill="#646970" text-anchor="end" dominant-baseline="middle"><title>the failed share of the passes; the lane is full at %s</title>%s</text>`,
		chartGutter-4, base+1+chartLane/2, percent(chartFullShare), percent(chartFullShare))
	for i, b := range bins {
		x := chartGutter + i*(chartBar+chartGap)
		span := b.Start.UTC().Format("15:04:05") + "–" + b.End.UTC().Format("15:04:05 UTC")
		dead := ""
		if b.FailedMessages > 0 {
			dead = fmt.Sprintf("; %d failed message%s", b.FailedMessages, plural(b.FailedMessages))
		}
		if !b.Known {
			fmt.Fprintf(&sb, `<g><title>%s: not sampled%s</title><rect class="none" x="%d" y="%.1f" width="%d" height="2" fill="#ddd"/>`,
				span, dead, x, base-2, chartBar)
			deadLane(&sb, x, base, b, 0)
			sb.WriteString(`</g>`)
			continue
		}
		share := 0.0
		if all := b.OK + b.Failed; all > 0 {
			share = b.Failed / all
		}
		okH, failH := barHeight(b.OK, top), barHeight(b.Failed, top)
		fmt.Fprintf(&sb, `<g class="bar"><title>%s: %s ok, %s failed passes (%s)%s</title>`, span, rate(b.OK), rate(b.Failed), percent(share), dead)
		fmt.Fprintf(&sb, `<rect x="%d" y="0" width="%d" height="%d" fill="transparent"/>`, x, chartBar, height)
		if okH > 0 {
			fmt.Fprintf(&sb, `<rect class="ok" x="%d" y="%.1f" width="%d" height="%.1f" fill="#2e8540"/>`, x, base-0.5-okH, chartBar, okH)
		}
		if failH > 0 {
			fmt.Fprintf(&sb, `<rect class="failed" x="%d" y="%.1f" width="%d" height="%.1f" fill="#c0392b"/>`, x, base-0.5-okH-failH, chartBar, failH)
		}
		if h := shareHeight(share); h > 0 {
			fmt.Fprintf(&sb, `<rect class="share" x="%d" y="%.1f" width="%d" height="%.1f" fill="#c0392b"/>`, x, base+1, chartBar, h)
		}
		deadLane(&sb, x, base, b, (b.OK+b.Failed)*b.End.Sub(b.Start).Seconds())
		sb.WriteString(`</g>`)
	}
	fmt.Fprintf(&sb, `<line class="axis" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999"/>`, chartGutter, base, chartGutter+bars, base)
	var width1 time.Duration // one bar's span
	if len(bins) > 0 {
		width1 = bins[0].End.Sub(bins[0].Start)
	}
	y := height - 2
	ticks := []int{}
	for i := 0; i < len(bins); i += 5 {
		ticks = append(ticks, i)
	}
	for _, i := range append(ticks, len(bins)) {
		x := chartGutter + min(i*(chartBar+chartGap), bars-1)
		fmt.Fprintf(&sb, `<line class="tick" x1="%d.5" y1="%.1f" x2="%d.5" y2="%.1f" stroke="#999"/>`, x, base, x, base+float64(chartLane+chartDeadLane)+1)
		label, anchor := "−"+spanFine(time.Duration(len(bins)-i)*width1), "middle"
		switch {
		case i == 0:
			label, anchor = "−"+window, "start"
		case i >= len(bins):
			label, anchor = "now", "end"
		}
		fmt.Fprintf(&sb, `<text x="%d" y="%d" font-size="10" fill="#646970" text-anchor="%s">%s</text>`, x, y, anchor, label)
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String()) //nolint:gosec // numbers and times only
}

// deadLane draws bar b's failed messages in their lane, at x under the
// axis at base, as a share of its passes (about passes of them; 0 when not
// known: then full).
func deadLane(sb *strings.Builder, x int, base float64, b bin, passes float64) {
	if b.FailedMessages <= 0 {
		return
	}
	h := float64(chartDeadLane)
	if passes >= 1 {
		h = min(max(float64(b.FailedMessages)/passes/chartFullShare*chartDeadLane, 2), chartDeadLane)
	}
	fmt.Fprintf(sb, `<rect class="dead" x="%d" y="%.1f" width="%d" height="%.1f" fill="#7b241c"/>`, x, base+1+chartLane, chartBar, h)
}

// barHeight scales v against top; anything above zero is at least 1 px.
func barHeight(v, top float64) float64 {
	if v <= 0 || top <= 0 {
		return 0
	}
	return min(max(v/top*float64(chartHeight), 1), chartHeight)
}

// shareHeight is a failed share's height in the lane: full at
// chartFullShare, and at least 2 px when anything failed.
func shareHeight(share float64) float64 {
	if share <= 0 {
		return 0
	}
	return min(max(share/chartFullShare*chartLane, 2), chartLane)
}
