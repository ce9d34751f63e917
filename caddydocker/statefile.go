package caddydocker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/apigate/gateway/internal/atomicfile"
)

// State is the content of the state file: the containers behind the last
// route set that applied, and that route set, so that a gateway started while
// the engine is down serves what it served before.
type State struct {
	// Version is the file format version (1).
	Version int `json:"version"`
	// Written is when the file was written.
	Written time.Time `json:"written"`
	// Server is the HTTP server the routes went to.
	Server string `json:"server"`
	// Hash is the hash of Routes.
	Hash string `json:"hash"`
	// Containers are the opted-in containers that were running.
	Containers []Container `json:"containers"`
	// Routes are the discovered routes that applied (without the server's own).
	Routes []json.RawMessage `json:"routes"`
	// Pools are the replicas of each service that the routes used.
	Pools map[string][]string `json:"pools,omitempty"`
	// Vanished are the routes of services that were gone, answering 404
	// no_route until the app's forget_after ends (their 404 routes are
	// the last of Routes).
	Vanished []VanishedRoute `json:"vanished,omitempty"`
}

// WriteState writes st to path atomically (internal/atomicfile): a
// temporary file in the same directory, synced, then renamed over path.
func WriteState(path string, st State) error {
	st.Version = 1
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("state_file directory: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("state_file: %w", err)
	}
	return nil
}

// ReadState reads a state file written by WriteState. A missing file is
// reported with an error satisfying errors.Is(err, fs.ErrNotExist).
func ReadState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("state_file %s: %w", path, err)
	}
	if st.Version != 1 {
		return st, fmt.Errorf("state_file %s: unsupported version %d", path, st.Version)
	}
	return st, nil
}
