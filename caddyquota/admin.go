package caddyquota

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/apigate/gateway/caddyquota/quotausage"
)

// AdminAPI is the admin.api.quota module: consumers' usage on Caddy's
// admin endpoint, GET /gateway/usage?consumer=<key>[&from=YYYY-MM-DD&to=YYYY-MM-DD]
// (a consumer's daily usage and where it stands now), or without a
// consumer the consumers with the most requests this month
// (&limit=N, default 100). Admin modules take no configuration.
type AdminAPI struct{}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.quota",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Routes returns the usage route.
func (AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: quotausage.Path, Handler: caddy.AdminHandlerFunc(serveUsage)}}
}

// maxUsageDays bounds a usage query's range.
const maxUsageDays = 400

func serveUsage(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed: GET %s", r.Method, quotausage.Path)}
	}
	a := activeApp()
	if a == nil {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: errors.New("the running config has no quota global option")}
	}
	q := r.URL.Query()
	var doc any
	var err error
	if consumer := q.Get("consumer"); consumer != "" {
		doc, err = a.consumerUsage(consumer, q.Get("from"), q.Get("to"))
	} else {
		limit := 100
		if v := q.Get("limit"); v != "" {
			if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 10000 {
				return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("invalid limit %q: want 1 to 10000", v)}
			}
		}
		doc, err = a.usageList(limit)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// consumerUsage builds GET /gateway/usage?consumer=K.
func (a *App) consumerUsage(consumer, fromS, toS string) (quotausage.Consumer, error) {
	st, err := a.store()
	if err != nil {
		return quotausage.Consumer{}, caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	now := a.clock()
	day, _ := st.Periods(now)
	// default: the previous month's first day to today
	prev := st.Calendar().Month(st.Calendar().Month(now).Start.Add(-time.Hour))
	fromID, toID := st.Calendar().Day(prev.Start).ID, day.ID
	if fromS != "" {
		if fromID, err = ParseDate(fromS); err != nil {
			return quotausage.Consumer{}, caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("from: %v", err)}
		}
	}
	if toS != "" {
		if toID, err = ParseDate(toS); err != nil {
			return quotausage.Consumer{}, caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("to: %v", err)}
		}
	}
	if toID < fromID || toID-fromID >= maxUsageDays {
		return quotausage.Consumer{}, caddy.APIError{HTTPStatus: http.StatusBadRequest,
			Err: fmt.Errorf("invalid range %s to %s: from must not be after to, and at most %d days", DateString(fromID), DateString(toID), maxUsageDays)}
	}
	out := quotausage.Consumer{
		Consumer: NormalizeConsumer(consumer),
		Plans:    st.Plans(consumer),
		Timezone: st.Calendar().Location().String(),
		From:     DateString(fromID), To: DateString(toID),
		Source:  "local",
		Windows: []quotausage.Window{},
	}
	out.Days = st.Usage(consumer, fromID, toID)
	if f := st.fleet.Load(); f != nil {
		days, err := f.Usage(consumer, fromID, toID)
		if err != nil {
			out.Note = "the fleet's counts could not be read (" + err.Error() + "): this gateway's own counts"
		} else {
			out.Days, out.Source = days, "fleet"
			for _, d := range days {
				if !contains(out.Plans, d.Plan) {
					out.Plans = append(out.Plans, d.Plan)
				}
			}
			sort.Strings(out.Plans)
		}
	}
	if out.Plans == nil {
		out.Plans = []string{}
	}
	out.Plan = st.LastPlan(consumer)
	if out.Plan == "" && len(out.Days) > 0 {
		out.Plan = out.Days[len(out.Days)-1].Plan
	}
	if p := a.planOf(out.Plan); p != nil {
		used := st.Standing(p, consumer, now)
		d, m := st.Periods(now)
		for i, l := range p.Limits {
			win := quotausage.Window{Plan: p.Name, Window: l.WindowName(), Limit: l.N, Used: used[i], Remaining: max(l.N-used[i], 0)}
			switch l.Unit {
			case Day:
				win.Reset = d.End.In(st.Calendar().Location()).Format(time.RFC3339)
			case Month:
				win.Reset = m.End.In(st.Calendar().Location()).Format(time.RFC3339)
			}
			out.Windows = append(out.Windows, win)
		}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// usageList builds GET /gateway/usage without a consumer.
func (a *App) usageList(limit int) (quotausage.List, error) {
	st, err := a.store()
	if err != nil {
		return quotausage.List{}, caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	now := a.clock()
	day, month := st.Periods(now)
	items := a.summaries(st, now)
	sort.SliceStable(items, func(i, j int) bool {
		if items[i].Month != items[j].Month {
			return items[i].Month > items[j].Month
		}
		return items[i].Consumer < items[j].Consumer
	})
	l := quotausage.List{Timezone: st.Calendar().Location().String(), Date: DateString(day.ID), Month: MonthString(month.ID), Consumers: len(items)}
	if len(items) > limit {
		items = items[:limit]
	}
	l.Items, l.Shown = items, len(items)
	return l, nil
}

// summaries are every slot's counts now, with the window of each
// slot's plan closest to its limit (calendar windows).
func (a *App) summaries(st *Store, now time.Time) []quotausage.Summary {
	cur := st.Current(now)
	out := make([]quotausage.Summary, 0, len(cur))
	for _, u := range cur {
		s := quotausage.Summary{Consumer: u.Consumer, Plan: u.Plan, Day: u.Day, Month: u.Month, Refused: u.Refused}
		if !u.LastUsed.IsZero() {
			s.LastSeen = u.LastUsed.In(st.Calendar().Location()).Format(time.RFC3339)
		}
		if p := a.planOf(u.Plan); p != nil {
			for _, l := range p.Limits {
				var used int64
				switch l.Unit {
				case Day:
					used = u.Day
				case Month:
					used = u.Month
				default:
					continue
				}
				share := 1.0
				if l.N > 0 {
					share = float64(used) / float64(l.N)
				}
				if s.Limit == "" || share > s.Used {
					s.Limit, s.Used = l.String(), share
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// Interface guard
var _ caddy.AdminRouter = (*AdminAPI)(nil)
