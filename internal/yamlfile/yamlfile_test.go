package yamlfile_test

import (
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

type topo struct {
	Name     string `yaml:"name"`
	Topology struct {
		Kind string `yaml:"kind"`
		K    int    `yaml:"k"`
	} `yaml:"topology"`
	Links struct {
		Rate units.Rate `yaml:"rate"`
		MTU  int        `yaml:"mtu"`
	} `yaml:"links"`
}

func TestErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"unknown key", "name: a\ntopology:\n  kind: star\n  kk: 4\n", "t.yaml:4: topology.kk: unknown key \"kk\""},
		{"bad rate", "name: a\nlinks:\n  rate: fast\n", "t.yaml:3: links.rate: rate \"fast\""},
		{"flow style", "name: a\nlinks: {mtu: 1500, rate: fast}\n", "t.yaml:2: links.rate: rate \"fast\""},
		{"bad int", "name: a\ntopology:\n  k: four\n", "t.yaml:3: topology.k: want an integer, got \"four\""},
		{"malformed", "name: a\n topology: [\n", "t.yaml:"},
		{"not a mapping", "- a\n", "t.yaml:1: the top level must be a mapping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v topo
			_, err := yamlfile.Decode("t.yaml", []byte(c.src), &v)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("got %v, want prefix %q", err, c.want)
			}
		})
	}
}

func TestLocateAfterValidation(t *testing.T) {
	var v topo
	doc, err := yamlfile.Decode("t.yaml", []byte("name: a\ntopology:\n  kind: fattree\n  k: 5\n"), &v)
	if err != nil {
		t.Fatal(err)
	}
	err = doc.Wrap(yamlfile.In("topology", yamlfile.Field("k", "must be even, got %d", v.Topology.K)))
	if got := err.Error(); got != "t.yaml:4: topology.k: must be even, got 5" {
		t.Fatal(got)
	}
	if got := doc.Locate("topology.missing"); got != 2 {
		t.Fatalf("nearest parent line: %d", got)
	}
}
