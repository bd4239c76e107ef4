// Command lifecycle times `fabric up` and `fabric down` of fat trees and
// reports the median wall time of each and the peak RSS of the fabric
// process (issue: lab lifecycle performance targets). It drives the real
// binary, so the figures include process start and YAML loading, as a
// user sees them.
//
//	go run ./bench/lifecycle -fabric bin/fabric -k 4,8,16 -n 5
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("fabric", "bin/fabric", "fabric binary")
	ks := flag.String("k", "4,8,16", "fat-tree sizes")
	n := flag.Int("n", 5, "repetitions per size (k=16 uses at most 3)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "fabric-bench")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	fmt.Printf("%-6s %6s %6s %10s %10s %12s %12s\n", "fattree", "nodes", "links", "up median", "down median", "peak RSS up", "peak RSS down")
	for _, ks := range strings.Split(*ks, ",") {
		k, err := strconv.Atoi(ks)
		if err != nil {
			fail(err)
		}
		lab := fmt.Sprintf("bench-k%d", k)
		file := filepath.Join(dir, lab+".yaml")
		if err := os.WriteFile(file, []byte(fmt.Sprintf("name: %s\ntopology: {kind: fattree, k: %d}\n", lab, k)), 0o644); err != nil {
			fail(err)
		}
		reps := *n
		if k >= 16 {
			reps = min(reps, 3)
		}
		var ups, downs []time.Duration
		var rssUp, rssDown int64
		for i := 0; i < reps; i++ {
			d, rss := run(*bin, "up", file)
			ups, rssUp = append(ups, d), max(rssUp, rss)
			d, rss = run(*bin, "down", lab)
			downs, rssDown = append(downs, d), max(rssDown, rss)
		}
		half := k / 2
		nodes := k*k*k/4 + k*k + half*half
		fmt.Printf("k=%-4d %6d %6d %10s %10s %9.1f MB %9.1f MB\n", k, nodes, 3*k*k*k/4,
			median(ups).Round(time.Millisecond), median(downs).Round(time.Millisecond), float64(rssUp)/1024, float64(rssDown)/1024)
	}
}

// run executes the binary and returns its wall time and peak RSS in KB.
func run(bin string, args ...string) (time.Duration, int64) {
	c := exec.Command(bin, args...)
	c.Stderr = os.Stderr
	t0 := time.Now()
	if err := c.Run(); err != nil {
		fail(fmt.Errorf("%s %v: %w", bin, args, err))
	}
	return time.Since(t0), c.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lifecycle:", err)
	os.Exit(1)
}
