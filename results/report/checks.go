package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// WriteChecks writes c into the run directory dir as ChecksFile,
// replacing an earlier check's whole or not at all.
func WriteChecks(dir string, c Checks) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, ChecksFile)
	if err := os.WriteFile(path+".tmp", append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		os.Remove(path + ".tmp")
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// LoadChecks reads the run directory dir's ChecksFile: nil when the run
// has none (it is not a validation run).
func LoadChecks(dir string) (*Checks, error) {
	b, err := os.ReadFile(filepath.Join(dir, ChecksFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var c Checks
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("report: %s: %w", filepath.Join(dir, ChecksFile), err)
	}
	return &c, nil
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
