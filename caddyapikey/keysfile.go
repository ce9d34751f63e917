package caddyapikey

import (
	"fmt"
	"os"
	"time"

	"github.com/apigate/gateway/caddyapikey/apikeys"
	"github.com/apigate/gateway/internal/filewatch"
)

// openKeysFile reads the keys file once (an error there fails the config
// load) and re-reads it when it changes (internal/filewatch): a file that
// then fails to read or parse keeps the last good set.
func openKeysFile(path string, interval time.Duration, now time.Time) (*filewatch.Value[*apikeys.Set], error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("keys_file: %v (make it with caddy gateway apikey new --sub <subject> --file %s; %s)", err, path, apikeys.FileFormat)
	}
	return filewatch.Open(func() (*apikeys.Set, []string, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("keys_file: %v", err)
		}
		set, err := apikeys.Parse(data)
		if err != nil {
			return nil, nil, fmt.Errorf("keys_file %s: %v", path, err)
		}
		return set, []string{path}, nil
	}, interval, now)
}
