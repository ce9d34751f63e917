package dashboard

import "github.com/apigate/gateway/caddyaudit"

// The recent-events ring of the audit module.
func init() { auditEvents = caddyaudit.Recent }
