package testenv

import (
	"fmt"
	"os"
	"testing"
)

// CI (.ci/run) names a file in FABRIC_CI_PROOF and checks, after the
// suite, that it says root and strict mode: proof that its variables
// reached go test. Outside CI there is nothing to prove.
func TestStrictModeReachedTheTests(t *testing.T) {
	path := os.Getenv(EnvCIProof)
	if path == "" {
		return
	}
	proof := fmt.Sprintf("uid=%d strict=%t down_all=%t", os.Geteuid(), Strict(), os.Getenv("FABRIC_TEST_DOWN_ALL") == "1")
	t.Log(proof)
	if err := os.WriteFile(path, []byte(proof), 0o644); err != nil {
		t.Fatal(err)
	}
}
