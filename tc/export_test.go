package tc

import (
	"os"
	"time"
)

func init() {
	if v := os.Getenv("BURST"); v != "" {
		burstTime, _ = time.ParseDuration(v)
	}
}
