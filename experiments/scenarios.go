package experiments

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// scenarioFS holds the built-in paper scenarios; the binary carries them,
// so `fabric run hull/table1` works from any directory.
//
//go:embed scenarios
var scenarioFS embed.FS

// DefaultScenario is what `fabric run` runs with no argument (quick).
const DefaultScenario = "hull/table1"

// Builtins lists the built-in scenario names ("hull/table1", ...).
func Builtins() []string {
	var names []string
	fs.WalkDir(scenarioFS, "scenarios", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
			names = append(names, strings.TrimSuffix(strings.TrimPrefix(p, "scenarios/"), ".yaml"))
		}
		return nil
	})
	slices.Sort(names)
	return names
}

// Builtin parses the built-in scenario name.
func Builtin(name string) (*Spec, error) {
	file := path.Join("scenarios", name+".yaml") // in scenarioFS
	data, err := scenarioFS.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("no built-in scenario %q (built-in: %s)", name, strings.Join(Builtins(), ", "))
	}
	spec, err := Parse(builtinPrefix+name+".yaml", data, "")
	if err != nil {
		return nil, err
	}
	spec.Dir = "" // no file of its own: nothing is its neighbour
	return spec, nil
}

// builtinPrefix is how a built-in scenario's file is named in messages
// and run.json (its path in the source tree).
const builtinPrefix = "experiments/scenarios/"

// SourceOf is what to give Open to run a recorded run's experiment again:
// the built-in scenario's name, or the file's path.
func SourceOf(rf *RunFile) string {
	if name, ok := strings.CutPrefix(rf.File, builtinPrefix); ok {
		if name = strings.TrimSuffix(name, ".yaml"); slices.Contains(Builtins(), name) {
			return name
		}
	}
	return rf.File
}

// Open resolves what `fabric run` is given: a file on disk, else a
// built-in scenario name.
func Open(arg string) (*Spec, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return Load(arg)
	}
	if slices.Contains(Builtins(), strings.TrimSuffix(arg, ".yaml")) {
		return Builtin(strings.TrimSuffix(arg, ".yaml"))
	}
	return nil, &yamlfile.Error{File: arg, Msg: fmt.Sprintf("no such file, and not a built-in scenario (built-in: %s)", strings.Join(Builtins(), ", "))}
}

// Select is what `fabric run [NAME|FILE] [--quick] [--resume DIR]` runs:
// the experiment named (a file or a built-in scenario), else the one a
// resumed run ran, else the quick variant of DefaultScenario. A resumed run
// must be of the same experiment and variant; the error says so as a
// *yamlfile.Error, which the CLI reports as bad input.
func Select(name string, quick bool, resume string) (*Spec, error) {
	var rf *RunFile
	if resume != "" {
		var err error
		if rf, err = ReadRunFile(resume); err != nil {
			return nil, &yamlfile.Error{File: resume, Msg: err.Error()}
		}
	}
	switch {
	case name != "":
	case rf != nil: // `fabric run --resume DIR` resumes whatever DIR ran
		name, quick = SourceOf(rf), rf.Quick
	default:
		name, quick = DefaultScenario, true
	}
	spec, err := Open(name)
	if err != nil {
		return nil, err
	}
	if quick {
		spec = spec.WithQuick()
	}
	if rf != nil && (rf.Name != spec.Name || rf.Quick != spec.IsQuick) {
		return nil, &yamlfile.Error{File: resume, Msg: fmt.Sprintf("that run is %s (quick=%v), not %s (quick=%v)", rf.Name, rf.Quick, spec.Name, spec.IsQuick)}
	}
	return spec, nil
}
