package delay

import (
	"testing"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// This kernel (NFQUEUE, nftables' compat expression) runs delay lines.
func TestCheck(t *testing.T) {
	testenv.RequireRoot(t)
	if err := Check(); err != nil {
		t.Fatal(err)
	}
}
