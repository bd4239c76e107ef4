package report

import (
	"fmt"
	"strings"
)

// ChecksFile is a validation run's checks against theory (fabric
// validate), kept in the run directory so that a results page can show
// them beside the run's report.
const ChecksFile = "checks.json"

// Checks is what checks.json holds: each row as `fabric validate`
// printed it, and the fabric that checked (a recheck can be newer than
// the run).
type Checks struct {
	CheckedBy string     `json:"checked_by"`
	Rows      []CheckRow `json:"rows"`
}

// CheckRow is one check's cells, its verdict, and the mechanism named when
// it did not pass.
type CheckRow struct {
	Name     string `json:"name"`
	Theory   string `json:"theory"`
	Measured string `json:"measured"`
	Error    string `json:"error"`
	Verdict  string `json:"verdict"`
	Cause    string `json:"cause,omitempty"`
}

// checksMarkdown is the checks as a table, with the cause of each that
// did not pass below it.
func checksMarkdown(b *strings.Builder, c *Checks) {
	pass := 0
	for _, r := range c.Rows {
		if r.Verdict == "PASS" {
			pass++
		}
	}
	fmt.Fprintf(b, "\n### Checks against theory\n\n%d of %d checks pass (checked by fabric `%s`).\n\n", pass, len(c.Rows), c.CheckedBy)
	b.WriteString("| check | theory | measured | error | verdict |\n|---|---:|---:|---:|---|\n")
	for _, r := range c.Rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", r.Name, r.Theory, r.Measured, r.Error, r.Verdict)
	}
	for _, r := range c.Rows {
		if r.Verdict != "PASS" && r.Cause != "" {
			fmt.Fprintf(b, "\n- %s %s: %s\n", r.Verdict, r.Name, r.Cause)
		}
	}
}
