package flows

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fabric-emu/fabric/results/stats"
)

// WriteCDFs writes one CDF file per non-empty distribution into dir:
// fct-<bucket>.cdf.csv (µs), slowdown-<bucket>.cdf.csv, qct.cdf.csv (µs) and
// throughput.cdf.csv (Mbit/s). It returns the files written.
func (a *Analysis) WriteCDFs(dir string) ([]string, error) {
	var written []string
	write := func(name, column string, sorted []float64) error {
		if len(sorted) == 0 {
			return nil
		}
		path := filepath.Join(dir, name+".cdf.csv")
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		err = stats.WriteCDF(f, column, stats.CDF(sorted, 2000))
		if err = errors.Join(err, f.Close()); err != nil {
			return fmt.Errorf("flows: %s: %w", path, err)
		}
		written = append(written, path)
		return nil
	}
	buckets := append(append([]BucketStats{a.All}, a.HULL...), a.Sizes...)
	for _, b := range buckets {
		slug := FileSlug(b.Bucket)
		if err := write("fct-"+slug, "fct_us", b.fct); err != nil {
			return written, err
		}
		if err := write("slowdown-"+slug, "slowdown", b.sd); err != nil {
			return written, err
		}
	}
	if a.Queries != nil {
		if err := write("qct", "qct_us", a.Queries.qct); err != nil {
			return written, err
		}
	}
	if a.Throughput != nil {
		if err := write("throughput", "mbps", a.Throughput.mbps); err != nil {
			return written, err
		}
	}
	return written, nil
}

// FileSlug makes a bucket name usable in a file name: "<10KB" → "lt10KB",
// "100KB-10MB" stays, ">10MB" → "gt10MB".
func FileSlug(name string) string {
	return strings.NewReplacer("<", "lt", ">", "gt", " ", "_", "/", "_").Replace(name)
}
