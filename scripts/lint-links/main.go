// Command lint-links checks every relative link in markdown files: the
// file or directory it names must exist, and a #fragment must name a
// heading of the page it points to. It reads no network. `make lint` runs
// it on README.md and docs/.
//
//	go run ./scripts/lint-links README.md docs
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

func main() {
	roots := os.Args[1:]
	if len(roots) == 0 {
		roots = []string{"README.md", "docs"}
	}
	var problems []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || filepath.Ext(path) != ".md" {
				return err
			}
			p, err := checkFile(path)
			problems = append(problems, p...)
			return err
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "lint-links:", err)
			os.Exit(1)
		}
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "lint-links: %d broken relative links\n", len(problems))
		os.Exit(1)
	}
}

// link matches an inline link or image, [text](target "title"), and a
// reference definition, [label]: target.
var (
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// checkFile returns "file:line: link: problem" for every broken relative
// link of one markdown file, outside code blocks and code spans.
func checkFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var problems []string
	fence := false
	for i, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if msg := check(path, t); msg != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", path, i+1, t, msg))
			}
		}
	}
	return problems, nil
}

// check says what is wrong with one link target of the page at from, or
// "" when nothing is (or it is not relative).
func check(from, target string) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "/") {
		return ""
	}
	file, frag, _ := strings.Cut(target, "#")
	dest := from
	if file != "" {
		dest = filepath.Join(filepath.Dir(from), filepath.FromSlash(file))
		if _, err := os.Stat(dest); err != nil {
			return "no such file or directory"
		}
	}
	if frag == "" || filepath.Ext(dest) != ".md" {
		return ""
	}
	anchors, err := headings(dest)
	if err != nil {
		return err.Error()
	}
	if !anchors[frag] {
		return fmt.Sprintf("no heading #%s in %s", frag, dest)
	}
	return ""
}

// headings returns the anchors GitHub gives the headings of a markdown
// file, numbered -1, -2, … when they repeat.
func headings(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if text != "" && text[0] != ' ' {
			continue // #tag, not a heading
		}
		a := slug(text)
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, nil
}

// inlineLinkText is a link inside a heading, whose text alone counts.
var inlineLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading's text: lower case, letters,
// digits, '-' and '_' kept, spaces made '-', everything else dropped.
func slug(text string) string {
	text = inlineLinkText.ReplaceAllString(strings.TrimSpace(text), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsNumber(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
