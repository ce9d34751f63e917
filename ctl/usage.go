package ctl

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/apigate/gateway/caddyquota/quotausage"
)

const usageUsage = `usage: gatewayctl usage [--admin host:port] [--consumer K] [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--limit N] [--json]
	show what consumers used of their quota plans, from the gateway's admin
	API (GET /gateway/usage; the quota global option must be configured).
	With --consumer: that consumer's requests per day and plan (admitted and
	refused; by default from the first day of the previous month to
	today, in the quota's time zone) and where it stands in each limit of
	its plan now. Without: the consumers with the most requests this month
	(--limit, default 100). With a fleet the counts are every gateway's.
	--json prints the admin API's JSON document as it is. --admin defaults
	to $CADDY_ADMIN when set (as for Caddy's own commands), else
	localhost:2019.
	example: gatewayctl usage --admin localhost:2019 --consumer alice
`

func cmdUsage(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	admin := fs.String("admin", defaultAdmin(), "the gateway's admin API address (host:port, or a http:// URL)")
	consumer := fs.String("consumer", "", "a consumer key (default: list the consumers)")
	from := fs.String("from", "", "first day (YYYY-MM-DD)")
	to := fs.String("to", "", "last day (YYYY-MM-DD)")
	limit := fs.Int("limit", 0, "consumers listed without --consumer (default 100)")
	asJSON := fs.Bool("json", false, "print the JSON document")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of the request")
	if done, err := parseFlags(fs, args, usageUsage, out); done {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), usageUsage)
	}
	base := *admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return fmt.Errorf("invalid --admin %q: want host:port", *admin)
	}
	u.Path = quotausage.Path
	q := url.Values{}
	if *consumer != "" {
		q.Set("consumer", *consumer)
	}
	if *from != "" {
		q.Set("from", *from)
	}
	if *to != "" {
		q.Set("to", *to)
	}
	if *limit != 0 {
		q.Set("limit", fmt.Sprint(*limit))
	}
	u.RawQuery = q.Encode()
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get(u.String())
	if err != nil {
		return fmt.Errorf("reading usage from the admin API at %s: %w", u.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var apiErr struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &apiErr) == nil && apiErr.Error != "" {
			return fmt.Errorf("admin API %s: %d: %s", u.Host, resp.StatusCode, apiErr.Error)
		}
		return fmt.Errorf("admin API %s: %d: %s", u.Host, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if *asJSON {
		_, err = out.Write(body)
		return err
	}
	if *consumer != "" {
		var c quotausage.Consumer
		if err := json.Unmarshal(body, &c); err != nil {
			return errors.New("the admin API's answer is not a usage document: " + err.Error())
		}
		return quotausage.WriteConsumer(out, c)
	}
	var l quotausage.List
	if err := json.Unmarshal(body, &l); err != nil {
		return errors.New("the admin API's answer is not a usage list: " + err.Error())
	}
	return quotausage.WriteList(out, l)
}

// defaultAdmin is the admin API address Caddy's own commands use without
// a config: $CADDY_ADMIN, else localhost:2019.
func defaultAdmin() string {
	if a := os.Getenv("CADDY_ADMIN"); a != "" {
		return a
	}
	return "localhost:2019"
}
