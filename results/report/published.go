package report

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// PublishedRun is one run on a results page (docs/results/NAME.md): where
// its artifacts are and what produced them, all read from those artifacts.
type PublishedRun struct {
	Dir        string // the artifact directory, relative to the page
	Experiment string
	File       string // the experiment file, as run.json names it
	Quick      bool
	Seed       uint64
	Started    time.Time
	Commit     string
	Modified   bool   // the commit's tree had uncommitted changes
	Kernel     string //
	Machine    string // "" when run.json has no machine
	StealPct   []float64
	Flagged    int      // trials whose recorded fidelity is unfaithful
	Figures    []string // PNG files at the top of Dir
	Report     string   // the run's report.md
	Checks     *Checks  // a validation run's checks.json, if any
	Limit      int64    // the largest file publish copied
	LeftOut    []LeftOut
}

// LeftOut is a file publish did not copy because it was over the limit.
type LeftOut struct {
	Path string `json:"path"` // relative to the run directory
	Size int64  `json:"size"`
}

// PublishedPage renders a results page: one section per run, newest
// first, each with the provenance of its numbers, its figures and its
// report.
func PublishedPage(name string, runs []PublishedRun) string {
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b PublishedRun) int { return b.Started.Compare(a.Started) })
	var b strings.Builder
	fmt.Fprintf(&b, "# Results: %s\n\n", name)
	fmt.Fprintf(&b, "`fabric publish RUN_DIR %s` wrote this page from the artifact directories under [%s/](%s/); "+
		"it rewrites the page from them on every publish, so edit the artifacts' source, not the page. "+
		"Every number here is from the run it sits under.\n", name, name, name)
	for _, r := range runs {
		publishedRun(&b, r)
	}
	return b.String()
}

func publishedRun(b *strings.Builder, r PublishedRun) {
	fmt.Fprintf(b, "\n## %s\n\n| | |\n|---|---|\n", r.Started.UTC().Format(time.DateOnly+" 15:04")+" UTC")
	variant := "full variant"
	if r.Quick {
		variant = "quick variant"
	}
	fmt.Fprintf(b, "| experiment | `%s` (`%s`, %s), seed %d |\n", r.Experiment, r.File, variant, r.Seed)
	commit := "not recorded"
	if r.Commit != "" {
		commit = "`" + r.Commit[:min(len(r.Commit), 12)] + "`"
		if r.Modified {
			commit += " with uncommitted changes"
		}
	}
	fmt.Fprintf(b, "| commit | %s |\n", commit)
	machine := r.Machine
	if machine == "" {
		machine = "not recorded"
	}
	fmt.Fprintf(b, "| machine | %s; kernel %s |\n", machine, r.Kernel)
	fmt.Fprintf(b, "| steal | %s |\n", stealText(r.StealPct))
	fmt.Fprintf(b, "| trials | %d, %d flagged unfaithful |\n", len(r.StealPct), r.Flagged)
	fmt.Fprintf(b, "| artifacts | [%s/](%s/): run.json, summary.csv, report.md, every trial's meta.json and fidelity records, "+
		"the figures as PNG; %s |\n", r.Dir, r.Dir, leftOutText(r.Limit, r.LeftOut))
	for _, f := range r.Figures {
		fmt.Fprintf(b, "\n![%s](%s/%s)\n", strings.TrimSuffix(f, ".png"), r.Dir, f)
	}
	if r.Checks != nil {
		checksMarkdown(b, r.Checks)
	}
	if r.Report != "" {
		b.WriteString("\n### The run's report\n\n")
		b.WriteString(embedded(r.Report, r.Dir))
	}
}

// stealText is the range of the trials' steal and its mean.
func stealText(pct []float64) string {
	if len(pct) == 0 {
		return "no trials"
	}
	lo, hi, sum := slices.Min(pct), slices.Max(pct), 0.0
	for _, p := range pct {
		sum += p
	}
	if lo == hi {
		return fmt.Sprintf("the hypervisor took %.1f %% of the CPU in every trial", lo)
	}
	return fmt.Sprintf("the hypervisor took %.1f–%.1f %% of the CPU per trial (mean %.1f %%)", lo, hi, sum/float64(len(pct)))
}

func leftOutText(limit int64, out []LeftOut) string {
	if len(out) == 0 {
		return fmt.Sprintf("no file was over %s", sizeText(limit))
	}
	var names []string
	for _, f := range out {
		names = append(names, fmt.Sprintf("`%s` (%s)", f.Path, sizeText(f.Size)))
	}
	return fmt.Sprintf("left out as over %s: %s", sizeText(limit), strings.Join(names, ", "))
}

// relativeLink matches a markdown link or image target that is neither
// absolute, nor a URL, nor an anchor.
var relativeLink = regexp.MustCompile(`(\]\()([^)#/:][^):]*\))`)

// embedded is a report.md inside a page: its title dropped, its headings
// two levels down, its links pointing into dir.
func embedded(md, dir string) string {
	var b strings.Builder
	fence := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		switch {
		case fence:
		case strings.HasPrefix(line, "# "):
			continue
		case strings.HasPrefix(line, "#"):
			line = "##" + line
		}
		if !fence {
			line = relativeLink.ReplaceAllString(line, "${1}"+dir+"/${2}")
		}
		b.WriteString(line)
	}
	return strings.TrimLeft(b.String(), "\n")
}
