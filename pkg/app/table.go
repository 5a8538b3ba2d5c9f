package app

import (
	"bytes"
	"io"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/pkg/twwidth"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// gap is the blanks between two columns of a table.
const gap = "  "

// table writes the commands' tables: a header line, then left-aligned
// columns two blanks apart, no borders, no blanks at a line's end (easy
// to read, easy to cut and grep), each cell printable and otherwise as it
// is. A column is as wide as its widest cell so far, as a terminal shows
// it (tablewriter's measure: a wide character takes two columns). Rows
// come in batches, each streamed through tablewriter with its widths
// fixed, so that pepsi queue ls holds one page at a time; a batch with a
// wider cell widens its columns from there on, since a stream cuts a cell
// wider than its column.
type table struct {
	out    lineWriter
	header []string
	widths []int // of the cells so far, without the gap
}

// newTable returns a table of header's columns that writes to w.
func newTable(w io.Writer, header []string) *table {
	header = printableCells(header)
	t := &table{out: lineWriter{w: w}, header: header, widths: make([]int, len(header))}
	t.measure([][]string{header})
	return t
}

// printTable writes a whole table: header, then rows.
func printTable(w io.Writer, header []string, rows [][]string) error {
	return newTable(w, header).write(rows)
}

// write writes rows, after the header if they are the first.
func (t *table) write(rows [][]string) error {
	cells := make([][]string, len(rows))
	for i, r := range rows {
		cells[i] = printableCells(r)
	}
	t.measure(cells)
	widths := tw.NewMapper[int, int]()
	for i, n := range t.widths {
		widths.Set(i, n+len(gap))
	}
	s := tablewriter.NewTable(&t.out,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Lines:      tw.LinesNone,
				Separators: tw.SeparatorsNone,
			},
		})),
		tablewriter.WithStreaming(tw.StreamConfig{Enable: true, StrictColumns: true}),
		tablewriter.WithColumnWidths(widths),
		tablewriter.WithPadding(tw.Padding{Right: gap, Overwrite: true}),
		tablewriter.WithTrimSpace(tw.Off),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
	)
	if err := s.Start(); err != nil {
		return err
	}
	if t.header != nil {
		s.Header(t.header)
		t.header = nil
	}
	for _, r := range cells {
		if err := s.Append(r); err != nil {
			return err
		}
	}
	if err := s.Close(); err != nil {
		return err
	}
	return t.out.err
}

// measure widens the columns to fit rows.
func (t *table) measure(rows [][]string) {
	for _, r := range rows {
		for i, cell := range r {
			if i < len(t.widths) {
				t.widths[i] = max(t.widths[i], twwidth.Width(cell))
			}
		}
	}
}

// lineWriter passes lines on to w without the blanks at their ends, and
// keeps the first error, which tablewriter's renderer drops.
type lineWriter struct {
	w      io.Writer
	blanks int // held back: they end a line unless more text follows
	err    error
}

func (l *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		line, rest, nl := bytes.Cut(p, []byte{'\n'})
		text := bytes.TrimRight(line, " ")
		if len(text) > 0 {
			l.write(bytes.Repeat([]byte{' '}, l.blanks))
			l.write(text)
			l.blanks = 0
		}
		l.blanks += len(line) - len(text)
		if nl {
			l.write([]byte{'\n'})
			l.blanks = 0
		}
		p = rest
	}
	return n, l.err
}

func (l *lineWriter) write(b []byte) {
	if l.err == nil && len(b) > 0 {
		_, l.err = l.w.Write(b)
	}
}
