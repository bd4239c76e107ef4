package report

import "strings"

// Table is a markdown table of cells its caller formatted: the one table
// renderer, general so that the experiments above the report can use it.
type Table struct {
	Header []string
	Right  []bool // per column: a number column, aligned right
	Rows   [][]string
}

// Markdown renders t: its header, the alignment line and a line per row.
func (t Table) Markdown() string {
	var b strings.Builder
	cellLine(&b, t.Header)
	b.WriteString("|")
	for i := range t.Header {
		if i < len(t.Right) && t.Right[i] {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		cellLine(&b, r)
	}
	return b.String()
}

func cellLine(b *strings.Builder, cells []string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" " + c + " |")
	}
	b.WriteString("\n")
}

// Heading is a markdown heading of level (1 is the document's title).
func Heading(level int, text string) string {
	return strings.Repeat("#", level) + " " + text + "\n"
}

// List is a markdown bullet list, an item a line.
func List(items []string) string {
	var b strings.Builder
	for _, it := range items {
		b.WriteString("- " + it + "\n")
	}
	return b.String()
}

// Blocks joins markdown blocks (headings, paragraphs, lists, tables) with
// a blank line between each; a non-empty block without a final newline
// gets one.
func Blocks(blocks ...string) string {
	var b strings.Builder
	for i, s := range blocks {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(s)
		if s != "" && !strings.HasSuffix(s, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}
