// Package quotausage is the format of the quota's usage documents, which
// the admin API serves at /gateway/usage, and their rendering as tables:
// `caddy gateway usage` (and gatewayctl) decodes and prints them. It imports nothing of Caddy.
package quotausage

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Path is where the admin API serves usage.
const Path = "/gateway/usage"

// Day is one consumer's requests on one plan and day.
type Day struct {
	Date     string `json:"date"`
	Plan     string `json:"plan"`
	Admitted int64  `json:"admitted"`
	Refused  int64  `json:"refused"`
}

// Window is where a consumer stands in one limit of its plan now.
type Window struct {
	Plan      string `json:"plan"`
	Window    string `json:"window"`
	Limit     int64  `json:"limit"`
	Used      int64  `json:"used"`
	Remaining int64  `json:"remaining"`
	Reset     string `json:"reset,omitempty"`
}

// Consumer is GET /gateway/usage?consumer=K: a consumer's daily usage
// per plan from From to To (dates in the quota's time zone), and its
// windows now.
type Consumer struct {
	Consumer string `json:"consumer"`
	// Plan is the plan of the consumer's latest request ("" when it has
	// none).
	Plan string `json:"plan"`
	// Plans are every plan it was counted on.
	Plans    []string `json:"plans"`
	Timezone string   `json:"timezone"`
	From     string   `json:"from"`
	To       string   `json:"to"`
	// Source is "local" (this gateway's counts) or "fleet" (every
	// gateway's, from the fleet's bucket); "local" with Note when the
	// fleet's counts could not be read.
	Source  string   `json:"source"`
	Note    string   `json:"note,omitempty"`
	Days    []Day    `json:"days"`
	Windows []Window `json:"windows"`
}

// Summary is one consumer's line in the list.
type Summary struct {
	Consumer string `json:"consumer"`
	Plan     string `json:"plan"`
	// Day and Month are the admitted requests of the current day and
	// month; Refused the day's refused ones.
	Day     int64 `json:"day"`
	Month   int64 `json:"month"`
	Refused int64 `json:"refused"`
	// Limit names the window closest to its limit and Used its share
	// (0 to 1) of it; empty for a plan without limits.
	Limit string  `json:"limit,omitempty"`
	Used  float64 `json:"used"`
	// LastSeen is the last request counted on this gateway (RFC 3339).
	LastSeen string `json:"last_seen,omitempty"`
}

// List is GET /gateway/usage without a consumer: the consumers with the
// most requests this month, first.
type List struct {
	Timezone string `json:"timezone"`
	Date     string `json:"date"`
	Month    string `json:"month"`
	// Consumers counted in all; Shown of them listed.
	Consumers int       `json:"consumers"`
	Shown     int       `json:"shown"`
	Items     []Summary `json:"items"`
}

// WriteConsumer prints a consumer's usage as tables.
func WriteConsumer(w io.Writer, c Consumer) error {
	fmt.Fprintf(w, "consumer %s", c.Consumer)
	if c.Plan != "" {
		fmt.Fprintf(w, ", plan %s", c.Plan)
	}
	fmt.Fprintf(w, " (%s to %s, %s, counts: %s)\n", c.From, c.To, c.Timezone, c.Source)
	if c.Note != "" {
		fmt.Fprintf(w, "note: %s\n", c.Note)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(c.Windows) > 0 {
		fmt.Fprintln(tw, "\nWINDOW\tLIMIT\tUSED\tREMAINING\tRESET")
		for _, win := range c.Windows {
			fmt.Fprintf(tw, "%s %s\t%d\t%d\t%d\t%s\n", win.Plan, win.Window, win.Limit, win.Used, win.Remaining, win.Reset)
		}
	}
	fmt.Fprintln(tw, "\nDATE\tPLAN\tADMITTED\tREFUSED")
	if len(c.Days) == 0 {
		fmt.Fprintln(tw, "(no requests)\t\t\t")
	}
	for _, d := range c.Days {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", d.Date, d.Plan, d.Admitted, d.Refused)
	}
	return tw.Flush()
}

// WriteList prints the list of consumers as a table.
func WriteList(w io.Writer, l List) error {
	fmt.Fprintf(w, "%d consumers (%d shown), %s, month %s (%s)\n\n", l.Consumers, l.Shown, l.Date, l.Month, l.Timezone)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tPLAN\tTODAY\tMONTH\tREFUSED TODAY\tNEAREST LIMIT")
	for _, s := range l.Items {
		near := "-"
		if s.Limit != "" {
			near = fmt.Sprintf("%s %.0f%%", s.Limit, 100*s.Used)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", strings.ReplaceAll(s.Consumer, "\t", " "), s.Plan, s.Day, s.Month, s.Refused, near)
	}
	return tw.Flush()
}
