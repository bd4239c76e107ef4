// Command lint-dates fails on a date in a comment of a non-test .go file:
// a comment says why in a sentence, and when something was measured
// belongs with its artifact or in a commit message. `make lint` runs it
// on the module.
//
//	go run ./scripts/lint-dates [DIR...]
package main

import (
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

const month = `(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)`

// date matches YYYY-MM-DD, a run directory's YYYYMMDDThhmmssZ, "D Mon
// YYYY", "Mon D, YYYY" and "Month YYYY"; a bare year, as in a paper's
// citation, is not a date.
var date = regexp.MustCompile(`\b(?:` +
	`(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])` +
	`|(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])T\d{4,6}Z?` +
	`|\d{1,2} ` + month + `\.?,? (?:19|20)\d\d` +
	`|` + month + `\.? (?:\d{1,2},? )?(?:19|20)\d\d` +
	`)\b`)

func main() {
	roots := os.Args[1:]
	if len(roots) == 0 {
		roots = []string{"."}
	}
	var found []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "bin") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := datesIn(path)
			found = append(found, f...)
			return err
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "lint-dates:", err)
			os.Exit(1)
		}
	}
	for _, f := range found {
		fmt.Fprintln(os.Stderr, f)
	}
	if len(found) > 0 {
		fmt.Fprintf(os.Stderr, "lint-dates: %d dates in comments; say why without when (the date goes in the commit message)\n", len(found))
		os.Exit(1)
	}
}

// datesIn returns "file:line: date in a comment: DATE" for every date in
// the comments of one Go file.
func datesIn(path string) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	file := fset.AddFile(path, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, scanner.ScanComments)
	var found []string
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return found, nil
		}
		if tok != token.COMMENT {
			continue
		}
		for _, loc := range date.FindAllStringIndex(lit, -1) {
			line := fset.Position(pos).Line + strings.Count(lit[:loc[0]], "\n")
			found = append(found, fmt.Sprintf("%s:%d: date in a comment: %s", path, line, lit[loc[0]:loc[1]]))
		}
	}
}
