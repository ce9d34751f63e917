package dashboard

import "github.com/apigate/gateway/caddyaudit"

// The recent-events ring of the audit module.
func init() {
	auditEvents = func(n int) []Event {
		evs := caddyaudit.Recent(n)
		out := make([]Event, len(evs))
		for i, e := range evs {
			out[i] = Event{
				Time: e.Time, RequestID: e.RequestID, Route: e.Route, Method: e.Method, Host: e.Host,
				Path: e.Path, Status: e.Status, DurationMS: e.DurationMS, RemoteIP: e.RemoteIP,
				Subject: e.Subject, Roles: e.Roles, Decision: e.Decision, Reason: e.Reason,
			}
		}
		return out
	}
}
