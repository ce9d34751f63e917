// Package fieldedits is how a handler module tells the fast path which
// request header fields it may change. The fast path sends a client's
// fields upstream as they came, with no copy through a header map, only
// while every handler that ran before the proxy changed none of them or
// named the ones it may change: those it then takes from the request's
// header map, as the handler left them (docs/fastpath.md, "The plain
// lane").
package fieldedits

// Declarer is a handler module that declares the request header fields it
// may set, change or delete. A handler that is not a Declarer may change
// any field, and the fast path copies the fields through a map after it.
type Declarer interface {
	// RequestFieldEdits returns the names of the request header fields
	// the handler may set, change or delete (none: it only reads them).
	// It is called once, when the fast path compiles its routes.
	RequestFieldEdits() []string
}
