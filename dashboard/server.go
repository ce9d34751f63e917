package dashboard

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/gateway/caddyopenapi"
)

//go:embed static
var staticFiles embed.FS

// static is the embedded page: index.html, app.js, app.css.
var static, _ = fs.Sub(staticFiles, "static")

// securityHeaders: the page loads nothing from elsewhere, and nothing may
// frame it.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// Server serves the dashboard: the page at "/" and the JSON documents
// under "/api/", relative to wherever it is mounted (the caller strips the
// mount path). The page uses relative URLs only.
type Server struct {
	Sources Sources
	// Refresh is how often the page polls; default 1s.
	Refresh time.Duration
}

// Serve answers one request whose path is relative to the mount point
// ("" or "/" is the page). It returns false when the path is not the
// dashboard's, so the caller can pass the request on.
func (s *Server) Serve(w http.ResponseWriter, r *http.Request, rel string) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method_not_allowed", "reason": "the dashboard is read-only: use GET"})
		return true
	}
	refresh := s.Refresh
	if refresh <= 0 {
		refresh = time.Second
	}
	switch rel {
	case "", "/", "/index.html":
		s.file(w, "index.html", "text/html; charset=utf-8")
	case "/app.js":
		s.file(w, "app.js", "text/javascript; charset=utf-8")
	case "/app.css":
		s.file(w, "app.css", "text/css; charset=utf-8")
	case "/favicon.ico":
		w.WriteHeader(http.StatusNoContent)
	case "/api/overview":
		writeJSON(w, http.StatusOK, s.Sources.Build(r.Context(), refresh, eventsParam(r, 50)))
	case "/api/routes":
		rs, errText := s.Sources.routes(r.Context())
		if errText != "" {
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": "config_unavailable", "reason": errText})
			return true
		}
		writeJSON(w, http.StatusOK, map[string]any{"routes": rs})
	case "/api/containers":
		o := s.Sources.Build(r.Context(), refresh, 0)
		writeJSON(w, http.StatusOK, o.Containers)
	case "/api/counters":
		o := s.Sources.Build(r.Context(), refresh, 0)
		writeJSON(w, http.StatusOK, map[string]any{"counters": o.Counters, "rate_limited_recent": o.RateLimited})
	case "/api/openapi":
		specs := []caddyopenapi.Summary{}
		if s.Sources.OpenAPI != nil {
			specs = append(specs, s.Sources.OpenAPI()...)
		}
		writeJSON(w, http.StatusOK, map[string]any{"specs": specs})
	case "/api/events":
		o := s.Sources.Build(r.Context(), refresh, eventsParam(r, 100))
		writeJSON(w, http.StatusOK, map[string]any{"enabled": o.EventsEnabled, "events": o.Events})
	default:
		if strings.HasPrefix(rel, "/api/") {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "not_found", "reason": "unknown dashboard endpoint " + strconv.Quote(rel)})
			return true
		}
		return false
	}
	return true
}

func eventsParam(r *http.Request, def int) int {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n < 0 {
		return def
	}
	if n > 256 {
		return 256
	}
	return n
}

func (s *Server) file(w http.ResponseWriter, name, ctype string) {
	b, err := fs.ReadFile(static, name)
	if err != nil {
		http.Error(w, "missing embedded file", http.StatusInternalServerError)
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding"}`)
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
