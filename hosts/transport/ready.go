package transport

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Ready tells the runner that this transport listens: the line "ready" on
// w (its stdout).
func Ready(w io.Writer) error {
	_, err := fmt.Fprintln(w, ReadyLine)
	return err
}

// OpenRecords opens the records file named by Env.Records for appending.
func OpenRecords(path string) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	return NewWriter(f), nil
}
