package caddyopenapi

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// The summary per document and operation outlives config reloads: it
// lives in a UsagePool keyed by the document's path, joined by every
// handler that loads that document and dropped when the last one goes.
var summaries = caddy.NewUsagePool()

// specSummary is the running summary of one document.
type specSummary struct {
	path string

	mu         sync.Mutex
	spec       *Spec
	loaded     time.Time
	loadError  string // the last reload that failed (the previous document stays)
	request    string // the modes of the handler that loaded it last
	response   string
	undeclared string
	ops        map[string]*opStats // by Operation.Key
	other      opStats             // requests no operation declares
}

func (s *specSummary) Destruct() error { return nil }

// opStats counts one operation's requests and violations. Counting a
// request costs one atomic add; a violation takes the lock.
type opStats struct {
	requests           atomic.Uint64
	refused            atomic.Uint64 // requests refused (request checks)
	wouldRefuse        atomic.Uint64 // requests a dry run let pass
	responseViolations atomic.Uint64 // responses that did not match (refused or not)
	responsesUnchecked atomic.Uint64 // responses too large (or encoded) to check

	mu   sync.Mutex
	seen map[violationKey]uint64
}

type violationKey struct{ location, keyword string }

// note counts the violations of one request or response (each location
// and keyword once).
func (o *opStats) note(vs []Violation) {
	if len(vs) == 0 {
		return
	}
	o.mu.Lock()
	if o.seen == nil {
		o.seen = map[violationKey]uint64{}
	}
	for i, v := range vs {
		k := violationKey{v.Location, v.Keyword}
		dup := false
		for _, prev := range vs[:i] {
			if prev.Location == k.location && prev.Keyword == k.keyword {
				dup = true
				break
			}
		}
		if !dup && (len(o.seen) < 1000 || o.seen[k] > 0) { // bounded: locations come from clients
			o.seen[k]++
		}
	}
	o.mu.Unlock()
}

func (s *specSummary) attach(spec *Spec, loadErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if loadErr != nil {
		s.loadError = loadErr.Error()
		return
	}
	if s.ops == nil {
		s.ops = map[string]*opStats{}
	}
	for _, op := range spec.Operations {
		st, ok := s.ops[op.Key()]
		if !ok {
			st = &opStats{}
			s.ops[op.Key()] = st
		}
		op.stats = st
	}
	s.spec, s.loaded, s.loadError = spec, time.Now().UTC(), ""
}

// Summary is the state of one OpenAPI document the gateway validates
// against, with its operations' counts: what GET /gateway/openapi and the
// dashboard show. Counts are totals since the document was first loaded
// by this process (they survive config reloads and changes of the file).
type Summary struct {
	// Spec is the document's path.
	Spec string `json:"spec"`
	// Title and Version are the document's info.title and openapi.
	Title   string `json:"title"`
	Version string `json:"openapi"`
	// Loaded is when the document in use was loaded.
	Loaded time.Time `json:"loaded"`
	// LoadError is why the file, changed since, did not load (the
	// document in use stays); empty when it loaded.
	LoadError string `json:"load_error,omitempty"`
	// Request and Response are the validation modes: enforce, dry_run
	// or off. Undeclared is pass or reject.
	Request    string `json:"request"`
	Response   string `json:"response"`
	Undeclared string `json:"undeclared"`
	// Operations are the document's operations, in path order.
	Operations []OperationSummary `json:"operations"`
	// Undeclared requests: those no operation of the document matches.
	UndeclaredRequests OperationSummary `json:"undeclared_requests"`
}

// OperationSummary counts one operation's requests and violations.
type OperationSummary struct {
	// Operation is the operationId ("<METHOD> <path>" without one).
	Operation string `json:"operation"`
	Method    string `json:"method,omitempty"`
	Path      string `json:"path,omitempty"`
	// Requests is how many requests the operation matched.
	Requests uint64 `json:"requests"`
	// Violations is how many of them did not match the document:
	// Refused (answered 4xx) plus WouldRefuse (let pass by dry_run).
	// That share of Requests is what enforcing would refuse.
	Violations  uint64 `json:"violations"`
	Refused     uint64 `json:"refused"`
	WouldRefuse uint64 `json:"would_refuse"`
	// ResponseViolations counts responses that did not match;
	// ResponsesUnchecked those too large (or compressed) to check.
	ResponseViolations uint64 `json:"response_violations"`
	ResponsesUnchecked uint64 `json:"responses_unchecked"`
	// MostCommon is the violation seen most often, with its count.
	MostCommon *CommonViolation `json:"most_common,omitempty"`
}

// CommonViolation is a location and keyword with how often it was seen.
type CommonViolation struct {
	Location string `json:"location"`
	Keyword  string `json:"keyword"`
	Count    uint64 `json:"count"`
}

func (o *opStats) summary(name, method, path string) OperationSummary {
	out := OperationSummary{
		Operation: name, Method: method, Path: path,
		Requests:           o.requests.Load(),
		Refused:            o.refused.Load(),
		WouldRefuse:        o.wouldRefuse.Load(),
		ResponseViolations: o.responseViolations.Load(),
		ResponsesUnchecked: o.responsesUnchecked.Load(),
	}
	out.Violations = out.Refused + out.WouldRefuse
	o.mu.Lock()
	for k, n := range o.seen {
		mc := out.MostCommon
		if mc == nil || n > mc.Count || n == mc.Count && k.location+k.keyword < mc.Location+mc.Keyword {
			out.MostCommon = &CommonViolation{Location: k.location, Keyword: k.keyword, Count: n}
		}
	}
	o.mu.Unlock()
	return out
}

// Snapshot returns the summary of every document the running config's
// openapi handlers validate against, by path.
func Snapshot() []Summary {
	out := []Summary{}
	summaries.Range(func(_, v any) bool {
		s := v.(*specSummary)
		s.mu.Lock()
		sum := Summary{Spec: s.path, Loaded: s.loaded, LoadError: s.loadError,
			Request: s.request, Response: s.response, Undeclared: s.undeclared, Operations: []OperationSummary{}}
		spec := s.spec
		s.mu.Unlock()
		if spec != nil {
			sum.Title, sum.Version = spec.Title, spec.Version
			for _, op := range spec.Operations {
				if op.stats != nil {
					sum.Operations = append(sum.Operations, op.stats.summary(op.ID, op.Method, op.Path))
				}
			}
		}
		sum.UndeclaredRequests = s.other.summary("(undeclared)", "", "")
		out = append(out, sum)
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Spec < out[j].Spec })
	return out
}
