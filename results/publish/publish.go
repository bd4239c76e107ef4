// Package publish turns a run directory into a published result: it copies
// the run's light files into docs/results/NAME/<run>/ and rewrites
// docs/results/NAME.md from every run published there, so that a number
// quoted in the docs can be traced to the artifacts it came from
// (`fabric publish RUN_DIR NAME`).
//
// Light files are JSON, JSON lines, CSV, markdown and PNG files of at most
// MaxFileSize each (the records a page reads, whatever their size), and
// trials' COMPLETE markers; set-aside runs, logs, pcaps, SVGs and the
// hosts' schedules (the experiment file and run.json's seed give them
// back) are never copied. A light file over the limit (such as
// an LMM's per-packet CSV) is left out and named on the page.
package publish

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/machine"
	"github.com/fabric-emu/fabric/results/report"
)

// MaxFileSize is the largest file publish copies: enough for every summary
// and figure, and for the per-message files of short runs, while a long
// run's records and per-packet latencies stay out of the repository.
const MaxFileSize = 256_000

// Names of the files publish reads and writes.
const (
	runFile      = "run.json"
	manifestFile = "published.json"
	reportFile   = "report.md"
)

// Result is what Publish did.
type Result struct {
	Page    string // docs/results/NAME.md
	Dir     string // docs/results/NAME/<run>
	Copied  int
	LeftOut []report.LeftOut
}

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// Publish copies runDir's light files into docs/results/name/<run>/ (a
// copy published before is replaced) and rewrites docs/results/name.md.
// On an error nothing it made is left behind.
func Publish(runDir, docs, name string) (*Result, error) {
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("publish: name %q: want lower-case letters, digits, '.', '-' or '_'", name)
	}
	if _, err := os.Stat(filepath.Join(runDir, runFile)); err != nil {
		return nil, fmt.Errorf("publish: %s is not a run directory: %w", runDir, err)
	}
	base := filepath.Join(docs, "results", name)
	_, before := os.Stat(base)
	res, err := publish(runDir, docs, name, base)
	if err != nil && errors.Is(before, fs.ErrNotExist) {
		os.RemoveAll(base) // a first publish under name that fails leaves no directory
	}
	return res, err
}

func publish(runDir, docs, name, base string) (*Result, error) {
	res := &Result{Page: base + ".md", Dir: filepath.Join(base, filepath.Base(filepath.Clean(runDir)))}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	tmp, err := os.MkdirTemp(base, ".publishing-")
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	defer os.RemoveAll(tmp)
	if res.Copied, res.LeftOut, err = copyLight(runDir, tmp); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(tmp, manifestFile), manifest{Limit: MaxFileSize, LeftOut: res.LeftOut}); err != nil {
		return nil, err
	}
	keep, undo, err := swapIn(tmp, res.Dir)
	if err != nil {
		return nil, err
	}
	if err := WritePage(docs, name); err != nil {
		undo()
		return nil, err
	}
	keep()
	return res, nil
}

// swapIn moves tmp to dir, setting aside what was there: keep drops the
// old copy, undo removes the new one and puts the old back.
func swapIn(tmp, dir string) (keep, undo func(), err error) {
	old := ""
	if _, err := os.Stat(dir); err == nil {
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return nil, nil, fmt.Errorf("publish: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			os.Rename(old, dir)
		}
		return nil, nil, fmt.Errorf("publish: %w", err)
	}
	keep = func() {
		if old != "" {
			os.RemoveAll(old)
		}
	}
	undo = func() {
		os.RemoveAll(dir)
		if old != "" {
			os.Rename(old, dir)
		}
	}
	return keep, undo, nil
}

// copyLight copies the light files of the run directory src into dst,
// keeping their paths, and returns how many it copied and which light
// files it left out as too large.
func copyLight(src, dst string) (copied int, leftOut []report.LeftOut, err error) {
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == report.SetAsideDir || d.Name() == "logs" {
				return filepath.SkipDir
			}
			return nil
		}
		if !light(d.Name()) || transport.IsScheduleFile(d.Name()) || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > MaxFileSize && !record(d.Name()) {
			leftOut = append(leftOut, report.LeftOut{Path: filepath.ToSlash(rel), Size: info.Size()})
			return nil
		}
		copied++
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil {
		return 0, nil, fmt.Errorf("publish: %w", err)
	}
	return copied, leftOut, nil
}

// record says whether a file is one a page reads (a run's or a trial's
// record, its checks), copied whatever its size: a trial without its
// meta.json is not counted (a long trial's CPU series passes the limit).
func record(name string) bool {
	switch name {
	case runFile, report.MetaFile, "fidelity.json", report.ChecksFile:
		return true
	}
	return false
}

// light says whether a file is of a kind publish copies.
func light(name string) bool {
	switch filepath.Ext(name) {
	case ".json", ".jsonl", ".csv", ".md", ".png":
		return true
	}
	return name == "COMPLETE"
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// manifest is published.json: what publish left out of a run, so that the
// page can be rewritten from the artifacts alone.
type manifest struct {
	Limit   int64            `json:"limit_bytes"`
	LeftOut []report.LeftOut `json:"left_out"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WritePage rewrites docs/results/name.md from every run directory under
// docs/results/name/.
func WritePage(docs, name string) error {
	base := filepath.Join(docs, "results", name)
	entries, err := os.ReadDir(base)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	var runs []report.PublishedRun
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		r, err := readRun(filepath.Join(base, e.Name()))
		if err != nil {
			return err
		}
		r.Dir = name + "/" + e.Name()
		runs = append(runs, r)
	}
	page := base + ".md"
	tmp := page + ".tmp"
	if err := os.WriteFile(tmp, []byte(report.PublishedPage(name, runs)), 0o644); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if err := os.Rename(tmp, page); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

// runJSON is the part of run.json a page shows.
type runJSON struct {
	Name    string    `json:"name"`
	File    string    `json:"file"`
	Quick   bool      `json:"quick"`
	Seed    uint64    `json:"seed"`
	Started time.Time `json:"started"`
	Fabric  struct {
		Commit   string `json:"commit"`
		Modified bool   `json:"modified"`
	} `json:"fabric"`
	Kernel  string           `json:"kernel"`
	Machine *machine.Machine `json:"machine"`
}

// readRun reads one published run directory.
func readRun(dir string) (report.PublishedRun, error) {
	var rf runJSON
	if err := readJSON(filepath.Join(dir, runFile), &rf); err != nil {
		return report.PublishedRun{}, err
	}
	r := report.PublishedRun{Experiment: rf.Name, File: rf.File, Quick: rf.Quick, Seed: rf.Seed, Started: rf.Started,
		Commit: rf.Fabric.Commit, Modified: rf.Fabric.Modified, Kernel: rf.Kernel}
	if rf.Machine != nil {
		r.Machine = rf.Machine.String()
	}
	var m manifest
	err := readJSON(filepath.Join(dir, manifestFile), &m)
	if err != nil {
		return r, err
	}
	r.Limit, r.LeftOut = m.Limit, m.LeftOut
	if b, err := os.ReadFile(filepath.Join(dir, reportFile)); err == nil {
		r.Report = string(b)
	}
	if r.Checks, err = report.LoadChecks(dir); err != nil {
		return r, err
	}
	if r.StealPct, r.Flagged, err = trials(dir); err != nil {
		return r, err
	}
	pngs, err := filepath.Glob(filepath.Join(dir, "*.png"))
	if err != nil {
		return r, err
	}
	for _, p := range pngs {
		r.Figures = append(r.Figures, filepath.Base(p))
	}
	slices.Sort(r.Figures)
	return r, nil
}

// trials reads every trial's meta.json under dir: the CPU the hypervisor
// took, and how many trials the runner judged unfaithful.
func trials(dir string) (steal []float64, flagged int, err error) {
	dirs, err := report.FindTrials(dir)
	if err != nil {
		return nil, 0, err
	}
	for _, d := range dirs {
		var m report.Meta
		if err := readJSON(filepath.Join(d, report.MetaFile), &m); err != nil {
			return nil, 0, err
		}
		var f report.Fidelity
		if m.Fidelity != nil {
			f = *m.Fidelity
		}
		steal = append(steal, f.CPUStealPct)
		if !f.Faithful() {
			flagged++
		}
	}
	return steal, flagged, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("publish: %s: %w", path, err)
	}
	return nil
}
