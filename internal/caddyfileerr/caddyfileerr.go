// Package caddyfileerr makes a Caddyfile error name the line of the bad
// token once.
//
// Caddy's httpcaddyfile wraps the error of a directive inside a block
// (handle, route, handle_path, handle_errors, ...) with the position of
// the block's own dispenser, which by then has read to the block's closing
// brace: `parsing caddyfile tokens for 'handle': parsing caddyfile tokens
// for 'jwt_auth': unrecognized subdirective 'bogus', at Caddyfile:38, at
// Caddyfile:50`. Line 38 is the bad token; line 50 is the `}` of the
// handle block, a line with nothing wrong on it, and one more for every
// level of nesting. (At the top level Caddy adds no second position; the
// nested case is its oversight, github.com/caddyserver/caddy's
// httpcaddyfile.Helper.Errf in parseSegmentAsSubroute, v2.11.9.)
//
// Caddy offers no hook into the adapter's errors, so this package reads
// and replaces one internal: the registered "caddyfile" adapter in
// caddyconfig's adapter table, wrapped so that its errors keep only their
// first position (Adapter). It is the one place in the gateway that does
// so; TestAdapterWrapped fails when the pinned Caddy changes the table.
// Importing the package (the gateway package does) installs it.
//
// The wrapper is also the one place where a module package completes the
// JSON a Caddyfile adapts to (AfterAdapt): caddydocker puts the
// docker_routes handlers where a server that discovery routes to has none,
// so that a config starts with them (Caddy offers no hook for a global
// option to add routes to a server). Otherwise it changes nothing but the
// text of an adapt error.
package caddyfileerr

import (
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"
	_ "unsafe" // go:linkname

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile" // registers "caddyfile" first
)

// adapters is caddyconfig's table of registered config adapters
// (RegisterAdapter writes it, GetAdapter reads it).
//
//go:linkname adapters github.com/caddyserver/caddy/v2/caddyconfig.configAdapters
var adapters map[string]caddyconfig.Adapter

// init wraps the registered "caddyfile" adapter (httpcaddyfile's init,
// imported above, has run).
func init() {
	if a, ok := adapters["caddyfile"]; ok && a != nil {
		if _, done := a.(Adapter); !done {
			adapters["caddyfile"] = Adapter{Adapter: a}
		}
	}
}

// Adapter is a config adapter whose errors name one position: the first,
// the bad token's. Its output has gone through the AfterAdapt steps, and
// its warnings end with what the reporters say of that output (`caddy
// adapt`, `caddy validate` and `caddy run` print them).
type Adapter struct {
	caddyconfig.Adapter
}

// Adapt adapts body with the wrapped adapter, then runs the AfterAdapt
// steps on the result and the reporters on what they made.
func (a Adapter) Adapt(body []byte, options map[string]any) ([]byte, []caddyconfig.Warning, error) {
	out, warnings, err := a.Adapter.Adapt(body, options)
	if err != nil {
		return out, warnings, OnePosition(err)
	}
	for _, step := range afterAdapt {
		more, err := step(out, options)
		if err != nil {
			return nil, warnings, err
		}
		out = more.Config
		warnings = append(warnings, more.Warnings...)
	}
	if len(reporters) > 0 {
		filename, _ := options["filename"].(string)
		src := parseSource(filename, body)
		for _, r := range reporters {
			warnings = append(warnings, r(out, src)...)
		}
	}
	return out, warnings, nil
}

// Adapted is what an AfterAdapt step returns: the config (JSON) and the
// warnings to add to the adapter's.
type Adapted struct {
	Config   []byte
	Warnings []caddyconfig.Warning
}

var afterAdapt []func(cfg []byte, options map[string]any) (Adapted, error)

// AfterAdapt registers a step that every successfully adapted Caddyfile
// goes through, in registration order (call it from an init function),
// before the reporters see it. A step returns the config unchanged when it
// has nothing to do; its warnings are printed as the adapter's own
// (`caddy adapt`, `caddy validate`, `caddy run`).
func AfterAdapt(step func(cfg []byte, options map[string]any) (Adapted, error)) {
	afterAdapt = append(afterAdapt, step)
}

// reporters say something of an adapted config (AddReporter).
var reporters []func(config []byte, src *Source) []caddyconfig.Warning

// AddReporter adds a reporter of adapted configs, from a package's init:
// the fast path says, per server, whether it serves it. src is the
// Caddyfile the config came from, for a reporter that names lines.
func AddReporter(r func(config []byte, src *Source) []caddyconfig.Warning) {
	reporters = append(reporters, r)
}

// Source is the Caddyfile an adapted config came from, as far as a
// reporter needs it to name a line: where each directive begins a line in
// its site blocks and named routes (the global options are not looked
// at), imports expanded. A nil *Source (a body the parser does not read
// again) has no uses.
type Source struct {
	uses []namedUse
}

type namedUse struct {
	name string
	Use
}

// Use is one place where a directive begins a line.
type Use struct {
	File string
	Line int
	// Keys are the addresses of its site block; Enclosing the tokens of
	// the lines that open the blocks around it (`handle /api/* {`), with
	// the definitions of the named matchers among them.
	Keys, Enclosing []string
}

// Uses returns where the directive named name begins a line, in the order
// of the Caddyfile, each file and line once.
func (s *Source) Uses(name string) []Use {
	if s == nil {
		return nil
	}
	var out []Use
	seen := map[string]bool{}
	for _, u := range s.uses {
		if key := u.File + ":" + strconv.Itoa(u.Line) + " " + name; u.name == name && !seen[key] {
			seen[key] = true
			out = append(out, u.Use)
		}
	}
	return out
}

// parseSource reads body again as Caddy's adapter did.
func parseSource(filename string, body []byte) *Source {
	if filename == "" {
		filename = "Caddyfile"
	}
	blocks, err := caddyfile.Parse(filename, body)
	if err != nil {
		return nil
	}
	src := &Source{}
	for _, sb := range blocks {
		if len(sb.Keys) == 0 {
			continue // the global options
		}
		keys := make([]string, len(sb.Keys))
		for i, k := range sb.Keys {
			keys[i] = k.Text
		}
		// named matchers (`@api path /api/*`), for the blocks that use them
		matchers := map[string][]string{}
		for _, seg := range sb.Segments {
			if name := seg.Directive(); strings.HasPrefix(name, "@") {
				for _, t := range seg[1:] {
					matchers[name] = append(matchers[name], t.Text)
				}
			}
		}
		for _, seg := range sb.Segments {
			src.addSegment(keys, matchers, seg)
		}
	}
	return src
}

// addSegment records the directives of a segment: its first token, and
// every token that begins a line inside its blocks. A named matcher on a
// block's line stands for its definition's tokens too.
func (s *Source) addSegment(keys []string, matchers map[string][]string, seg caddyfile.Segment) {
	type opener struct{ tokens []string }
	var stack []opener
	lineStart := 0 // index of the first token of the current line
	for i, t := range seg {
		if i > 0 && (t.Line != seg[i-1].Line || t.File != seg[i-1].File) {
			lineStart = i
		}
		switch {
		case t.Text == "{" && !t.Quoted():
			var toks []string
			for _, o := range seg[lineStart:i] {
				toks = append(toks, o.Text)
				toks = append(toks, matchers[o.Text]...)
			}
			stack = append(stack, opener{toks})
			continue
		case t.Text == "}" && !t.Quoted():
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if i != lineStart {
			continue
		}
		enc := []string{}
		for _, o := range stack {
			enc = append(enc, o.tokens...)
		}
		s.uses = append(s.uses, namedUse{t.Text, Use{File: t.File, Line: t.Line, Keys: keys, Enclosing: enc}})
	}
}

// position is one ", at <file>:<line>" that Caddy's Dispenser.WrapErr
// appends, with its optional " import chain [...]".
var position = regexp.MustCompile(`, at [^,\s]+:\d+( import chain \[[^\]]*\])?`)

// OnePosition returns err with every position after the first removed
// (err itself when it has one or none). The error's text is all that
// changes.
func OnePosition(err error) error {
	msg := err.Error()
	locs := position.FindAllStringIndex(msg, -1)
	if len(locs) < 2 {
		return err
	}
	var b strings.Builder
	b.WriteString(msg[:locs[1][0]])
	prev := locs[1][1]
	for _, l := range locs[2:] {
		b.WriteString(msg[prev:l[0]])
		prev = l[1]
	}
	b.WriteString(msg[prev:])
	return &onePosition{msg: b.String(), err: err}
}

type onePosition struct {
	msg string
	err error
}

func (e *onePosition) Error() string { return e.msg }
func (e *onePosition) Unwrap() error { return e.err }

// Servers returns the HTTP servers of an adapted config (a reporter's
// input) by name, with the names sorted: what a reporter walks. Nil when
// the config does not parse.
func Servers(config []byte) ([]string, map[string]json.RawMessage) {
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]json.RawMessage `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if json.Unmarshal(config, &cfg) != nil {
		return nil, nil
	}
	names := make([]string, 0, len(cfg.Apps.HTTP.Servers))
	for name := range cfg.Apps.HTTP.Servers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, cfg.Apps.HTTP.Servers
}
