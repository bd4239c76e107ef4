package report

import "testing"

// A table renders its header, its alignment line (numbers to the right)
// and a line per row; blocks are a blank line apart, an empty block
// keeping its place.
func TestTableAndBlocks(t *testing.T) {
	tab := Table{Header: []string{"scheme", "rate"}, Right: []bool{false, true}, Rows: [][]string{{"fifo", "16"}, {"w", "–"}}}
	md := Blocks(Heading(2, "Capacity"), "An intro.", tab.Markdown(), "Order:", List([]string{"a", "b"}), List(nil), "End.")
	want := "## Capacity\n\nAn intro.\n\n| scheme | rate |\n|---|---:|\n| fifo | 16 |\n| w | – |\n\nOrder:\n\n- a\n- b\n\n\nEnd.\n"
	if md != want {
		t.Errorf("got\n%q\nwant\n%q", md, want)
	}
	if got := (Table{Header: []string{"a", "b", "c"}, Right: []bool{true}}).Markdown(); got != "| a | b | c |\n|---:|---|---|\n" {
		t.Errorf("short Right: %q", got)
	}
}
