package units

import "testing"

func TestParseRate(t *testing.T) {
	good := map[string]Rate{"10 Gbps": 10 * Gbit, "100Mbit": 100 * Mbit, "1gbit": Gbit, "950M": 950 * Mbit, "1e9": Gbit, "64kbit": 64 * Kbit, "2.5Gbps": 2500 * Mbit}
	for in, want := range good {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"fast", "", "10 MBps", "-5Mbit", "Mbit"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
	if s := (950 * Mbit).String(); s != "950Mbit" {
		t.Error(s)
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]Size{"30KB": 30_000, "700KB": 700_000, "1.5MB": 1_500_000, "64KiB": 65536, "1500": 1500, "10MB": 10 * MB}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"big", "10 furlongs", ""} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}
