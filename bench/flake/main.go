// Command flake runs the whole test suite several times in a row and
// prints how often each test passed, with each run's duration, the CPU
// the machine had and the share the hypervisor took, and every retry that
// fired with the stall it cited (internal/testenv.Retry): the suite's
// measured flake rate. `make flake N=3` runs it.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/internal/cpustat"
)

// event is one line of `go test -json`.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on pass and fail
}

// run is one run of the suite.
type run struct {
	elapsed time.Duration
	cpu     cpustat.Share
	failed  []string
	// failures are the failed tests' own output, by name: what a flake
	// said, kept for the table's reader.
	failures map[string][]string
	retries  []string
	// unjudged are the tests testenv.Retry skipped: steal in every attempt.
	unjudged []string
	ok       bool
	seconds  map[string]float64 // each top-level test's and package's
}

func main() {
	n := flag.Int("n", 3, "runs of the suite")
	timeout := flag.String("timeout", "25m", "go test's -timeout per run")
	flag.Parse()
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	passes := map[string]int{}
	var runs []run
	for i := 1; i <= *n; i++ {
		fmt.Fprintf(os.Stderr, "flake: run %d of %d\n", i, *n)
		r, err := suite(pkgs, *timeout, passes)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flake:", err)
			os.Exit(2)
		}
		runs = append(runs, r)
	}
	print(os.Stdout, runs, passes, *n)
	for _, r := range runs {
		if !r.ok {
			os.Exit(1)
		}
	}
}

// suite runs go test once, counting each test that passed into passes.
func suite(pkgs []string, timeout string, passes map[string]int) (run, error) {
	args := append([]string{"test", "-p", "1", "-parallel", "4", "-count=1", "-timeout", timeout, "-json"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return run{}, err
	}
	cpu0, err := cpustat.Read()
	if err != nil {
		return run{}, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return run{}, err
	}
	r := tally(out, passes)
	werr := cmd.Wait()
	r.elapsed = time.Since(t0)
	cpu1, err := cpustat.Read()
	if err != nil {
		return run{}, err
	}
	r.cpu, _ = cpu1.Since(cpu0)
	r.ok = werr == nil && len(r.failed) == 0
	return r, nil
}

// tally reads go test's events.
func tally(in io.Reader, passes map[string]int) run {
	r := run{seconds: map[string]float64{}, failures: map[string][]string{}}
	out := map[string]string{} // a test's "not judged" line, by name
	lines := outputs{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		name := strings.TrimPrefix(e.Package, "github.com/fabric-emu/fabric/")
		if e.Test != "" {
			name += "." + e.Test
		}
		top := e.Test != "" && !strings.Contains(e.Test, "/")
		if e.Action == "output" && strings.Contains(e.Output, "not judged: the hypervisor") {
			out[name] = e.Output
		}
		lines.add(e, name)
		if (e.Action == "pass" || e.Action == "fail") && (top || e.Test == "") {
			r.seconds[name] = e.Elapsed
		}
		switch {
		case e.Action == "run" && top:
			passes[name] += 0 // every test that ran has a row
		case e.Action == "pass" && top:
			passes[name]++
		case e.Action == "fail" && (top || e.Test == ""):
			r.failed = append(r.failed, name)
			if top {
				r.failures[name] = lines[name]
			}
		case e.Action == "skip" && top && strings.Contains(out[name], "not judged: the hypervisor"):
			r.unjudged = append(r.unjudged, name)
		case e.Action == "output" && strings.Contains(e.Output, "during a measured stall"):
			r.retries = append(r.retries, name+": "+strings.TrimSpace(e.Output))
		}
		if top {
			lines.ended(e, name)
		}
	}
	return r
}

// outputs is each running top-level test's output, its subtests'
// included, by name: a failure's is kept, the rest dropped as each ends.
type outputs map[string][]string

func (o outputs) add(e event, name string) {
	if e.Action == "output" && e.Test != "" {
		top, _, _ := strings.Cut(name, "/")
		o[top] = append(o[top], strings.TrimRight(e.Output, "\n"))
	}
}

// ended forgets the output of top-level test name once e ends it.
func (o outputs) ended(e event, name string) {
	switch e.Action {
	case "pass", "fail", "skip":
		delete(o, name)
	}
}

// failureLines is how much of a failed test's output the table keeps.
const failureLines = 40

func print(w io.Writer, runs []run, passes map[string]int, n int) {
	fmt.Fprintf(w, "| run | result | duration | CPU idle | steal | failed |\n|---|---|---|---|---|---|\n")
	for i, r := range runs {
		res := "pass"
		if !r.ok {
			res = "FAIL"
		}
		fmt.Fprintf(w, "| %d | %s | %v | %.0f %% | %.1f %% | %s |\n", i+1, res, r.elapsed.Round(time.Second), r.cpu.IdlePct, r.cpu.StealPct, strings.Join(r.failed, ", "))
	}
	names := make([]string, 0, len(passes))
	for k := range passes {
		names = append(names, k)
	}
	slices.Sort(names)
	fmt.Fprintf(w, "\n| test | passed |\n|---|---|\n")
	for _, k := range names {
		mark := ""
		if passes[k] < n {
			mark = " ←"
		}
		fmt.Fprintf(w, "| %s | %d of %d%s |\n", k, passes[k], n, mark)
	}
	printSlowest(w, runs, 15)
	fmt.Fprintf(w, "\nRetries that fired:\n")
	none := true
	for i, r := range runs {
		for _, x := range r.retries {
			fmt.Fprintf(w, "- run %d: %s\n", i+1, x)
			none = false
		}
	}
	if none {
		fmt.Fprintln(w, "- none")
	}
	fmt.Fprintf(w, "\nFailures (each failed test's last %d lines of output):\n", failureLines)
	none = true
	for i, r := range runs {
		for _, name := range slices.Sorted(maps.Keys(r.failures)) {
			l := r.failures[name]
			fmt.Fprintf(w, "- run %d: %s\n", i+1, name)
			for _, x := range l[max(0, len(l)-failureLines):] {
				fmt.Fprintf(w, "    %s\n", x)
			}
			none = false
		}
	}
	if none {
		fmt.Fprintln(w, "- none")
	}
	fmt.Fprintf(w, "\nNot judged (the hypervisor took the CPU in every attempt):\n")
	none = true
	for i, r := range runs {
		for _, x := range r.unjudged {
			fmt.Fprintf(w, "- run %d: %s\n", i+1, x)
			none = false
		}
	}
	if none {
		fmt.Fprintln(w, "- none")
	}
}

// printSlowest lists the packages and the n tests that took longest, in
// seconds per run: what the suite's duration is made of.
func printSlowest(w io.Writer, runs []run, n int) {
	mean := map[string]float64{}
	for _, r := range runs {
		for k, v := range r.seconds {
			mean[k] += v / float64(len(runs))
		}
	}
	var pkgs, tests []string
	for k := range mean {
		if strings.Contains(k, ".Test") {
			tests = append(tests, k)
		} else {
			pkgs = append(pkgs, k)
		}
	}
	bySeconds := func(a, b string) int { return cmp.Compare(mean[b], mean[a]) }
	slices.SortFunc(pkgs, bySeconds)
	slices.SortFunc(tests, bySeconds)
	fmt.Fprintf(w, "\n| slowest packages and tests | seconds (mean per run) |\n|---|---:|\n")
	for _, k := range pkgs[:min(len(pkgs), 6)] {
		fmt.Fprintf(w, "| %s | %.1f |\n", k, mean[k])
	}
	for _, k := range tests[:min(len(tests), n)] {
		fmt.Fprintf(w, "| %s | %.1f |\n", k, mean[k])
	}
}
