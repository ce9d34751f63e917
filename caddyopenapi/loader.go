package caddyopenapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits of what a document may hold, so that a hostile or broken file
// (YAML aliases expanding without end, a file of gigabytes) fails the load
// with an error instead of taking the gateway's memory.
const (
	maxFileSize   = 64 << 20  // bytes per file
	maxValues     = 1_000_000 // decoded values per file, aliases expanded
	maxAliasDepth = 64        // aliases inside aliases
	maxRefHops    = 64        // $ref to $ref to ... (a longer chain is a cycle)
)

// DocError is a broken document: the file, the line and the JSON pointer
// of what is wrong, and what.
type DocError struct {
	File    string // absolute path
	Line    int    // 1-based; 0 when unknown
	Pointer string // JSON pointer ("" is the document)
	Msg     string
}

func (e *DocError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": #")
	b.WriteString(e.Pointer)
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// source is one file of a document: the root file or one a $ref names.
// Its values are those of encoding/json with UseNumber (map[string]any,
// []any, string, json.Number, bool, nil), whether it was written as YAML
// or JSON.
type source struct {
	path  string         // absolute path
	url   string         // file:// URL, as the schema compiler names it
	root  any            // the decoded document
	lines map[string]int // JSON pointer -> line of the value
}

// loader reads a document's files, each once.
type loader struct {
	files map[string]*source // by absolute path
	order []string           // paths in the order they were read
	// rewrite, when set, is applied to each file's values as it is read
	// (OpenAPI 3.0's nullable)
	rewrite func(any)
}

func newLoader() *loader { return &loader{files: map[string]*source{}} }

// load reads and decodes one file (once).
func (l *loader) load(path string) (*source, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if s, ok := l.files[abs]; ok {
		return s, nil
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxFileSize {
		return nil, &DocError{File: abs, Msg: fmt.Sprintf("file of %d bytes, more than the %d a document file may have", fi.Size(), maxFileSize)}
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, err
	}
	s, err := decodeSource(abs, data)
	if err != nil {
		return nil, err
	}
	if l.rewrite != nil {
		l.rewrite(s.root)
	}
	l.files[abs] = s
	l.order = append(l.order, abs)
	return s, nil
}

// decodeSource decodes a YAML or JSON file.
func decodeSource(abs string, data []byte) (*source, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(abs, err)
	}
	s := &source{path: abs, url: fileURL(abs), lines: map[string]int{}}
	if doc.Kind == 0 { // empty file
		return nil, &DocError{File: abs, Line: 1, Msg: "empty document"}
	}
	c := converter{src: s}
	v, err := c.value(&doc, "", 0)
	if err != nil {
		return nil, err
	}
	s.root = v
	return s, nil
}

// yamlError turns the YAML parser's error ("yaml: line 12: did not find
// expected key") into a DocError with its line.
func yamlError(abs string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return &DocError{File: abs, Line: line, Msg: "not YAML or JSON: " + msg}
}

func fileURL(abs string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// converter turns YAML nodes into JSON values, noting each value's line.
type converter struct {
	src    *source
	values int
}

func (c *converter) fail(n *yaml.Node, ptr, format string, args ...any) error {
	return &DocError{File: c.src.path, Line: n.Line, Pointer: ptr, Msg: fmt.Sprintf(format, args...)}
}

func (c *converter) value(n *yaml.Node, ptr string, aliases int) (any, error) {
	c.values++
	if c.values > maxValues {
		return nil, c.fail(n, ptr, "more than %d values (YAML aliases expanded): not loaded", maxValues)
	}
	if _, ok := c.src.lines[ptr]; !ok {
		c.src.lines[ptr] = n.Line
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, c.fail(n, ptr, "empty document")
		}
		return c.value(n.Content[0], ptr, aliases)
	case yaml.AliasNode:
		if aliases >= maxAliasDepth || n.Alias == nil {
			return nil, c.fail(n, ptr, "YAML aliases nested more than %d deep", maxAliasDepth)
		}
		return c.value(n.Alias, ptr, aliases+1)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		if err := c.mapping(n, ptr, aliases, m); err != nil {
			return nil, err
		}
		return m, nil
	case yaml.SequenceNode:
		a := make([]any, 0, len(n.Content))
		for i, e := range n.Content {
			v, err := c.value(e, ptr+"/"+strconv.Itoa(i), aliases)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	case yaml.ScalarNode:
		return c.scalar(n, ptr)
	}
	return nil, c.fail(n, ptr, "unexpected YAML node")
}

func (c *converter) mapping(n *yaml.Node, ptr string, aliases int, m map[string]any) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" { // << : *anchor
			target := v
			for target.Kind == yaml.AliasNode && target.Alias != nil {
				target = target.Alias
			}
			if target.Kind != yaml.MappingNode {
				return c.fail(k, ptr, "a YAML merge key (<<) needs a mapping")
			}
			if err := c.mapping(target, ptr, aliases+1, m); err != nil {
				return err
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return c.fail(k, ptr, "a mapping key must be a string")
		}
		key := k.Value
		child := ptr + "/" + escapePointer(key)
		if _, dup := m[key]; dup {
			return c.fail(k, child, "duplicate key %q", key)
		}
		if _, ok := c.src.lines[child]; !ok {
			c.src.lines[child] = k.Line // a member is at its key's line
		}
		val, err := c.value(v, child, aliases)
		if err != nil {
			return err
		}
		m[key] = val
	}
	return nil
}

func (c *converter) scalar(n *yaml.Node, ptr string) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, c.fail(n, ptr, "%v", err)
		}
		return b, nil
	case "!!int", "!!float":
		if isJSONNumber(n.Value) {
			return json.Number(n.Value), nil
		}
		if n.ShortTag() == "!!int" {
			var i int64
			if err := n.Decode(&i); err == nil {
				return json.Number(strconv.FormatInt(i, 10)), nil
			}
		}
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, c.fail(n, ptr, "%v", err)
		}
		s := strconv.FormatFloat(f, 'g', -1, 64)
		if !isJSONNumber(s) { // .inf, .nan
			return nil, c.fail(n, ptr, "number %s has no JSON form", n.Value)
		}
		return json.Number(s), nil
	}
	// strings, and what YAML types that JSON has not (timestamps,
	// binary) as the text written
	return n.Value, nil
}

// isJSONNumber reports whether s is a number as JSON writes it.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i == len(s) {
		return false
	}
	if s[i] == '0' {
		i++
	} else if s[i] >= '1' && s[i] <= '9' {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	} else {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(s)
}

// escapePointer escapes a key as a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	if !strings.Contains(s, "~") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// node is a value at a place in a document: what a $ref leads to.
type node struct {
	src *source
	ptr string
	v   any
}

// line returns the line of the value at the node (or of its nearest
// parent that has one).
func (n node) line() int { return n.src.lineOf(n.ptr) }

func (s *source) lineOf(ptr string) int {
	for {
		if l, ok := s.lines[ptr]; ok {
			return l
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return 0
		}
		ptr = ptr[:i]
	}
}

func (n node) errorf(format string, args ...any) *DocError {
	return &DocError{File: n.src.path, Line: n.line(), Pointer: n.ptr, Msg: fmt.Sprintf(format, args...)}
}

// child returns the member key of an object node (ok false when absent).
func (n node) child(key string) (node, bool) {
	m, _ := n.v.(map[string]any)
	v, ok := m[key]
	return node{src: n.src, ptr: n.ptr + "/" + escapePointer(key), v: v}, ok
}

// index returns element i of an array node.
func (n node) index(i int) node {
	a, _ := n.v.([]any)
	return node{src: n.src, ptr: n.ptr + "/" + strconv.Itoa(i), v: a[i]}
}

// str returns the string member key ("" when absent); a member of another
// type is an error.
func (n node) str(key string) (string, error) {
	c, ok := n.child(key)
	if !ok || c.v == nil {
		return "", nil
	}
	s, isStr := c.v.(string)
	if !isStr {
		return "", c.errorf("%s must be a string", key)
	}
	return s, nil
}

// boolean returns the boolean member key (def when absent).
func (n node) boolean(key string, def bool) (bool, error) {
	c, ok := n.child(key)
	if !ok || c.v == nil {
		return def, nil
	}
	b, isBool := c.v.(bool)
	if !isBool {
		return false, c.errorf("%s must be true or false", key)
	}
	return b, nil
}

// object requires the node to be an object.
func (n node) object(what string) (map[string]any, error) {
	m, ok := n.v.(map[string]any)
	if !ok {
		return nil, n.errorf("%s must be an object", what)
	}
	return m, nil
}

// at returns the value at a JSON pointer in s.
func (s *source) at(ptr string) (any, bool) {
	v := s.root
	if ptr == "" {
		return v, true
	}
	if ptr[0] != '/' {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = unescapePointer(tok)
		switch t := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = t[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(t) || strconv.Itoa(i) != tok {
				return nil, false
			}
			v = t[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// deref follows n's $ref (and the $ref of what it names, and so on) to
// the object it stands for; a node without $ref is returned as it is.
// Other files are read as they are named.
func (l *loader) deref(n node) (node, error) {
	seen := map[string]bool{}
	for hops := 0; ; hops++ {
		m, ok := n.v.(map[string]any)
		if !ok {
			return n, nil
		}
		rv, has := m["$ref"]
		if !has {
			return n, nil
		}
		rn, _ := n.child("$ref") // errors name the $ref itself
		ref, isStr := rv.(string)
		if !isStr {
			return n, rn.errorf("$ref must be a string")
		}
		key := n.src.path + "#" + n.ptr
		if seen[key] || hops >= maxRefHops {
			return n, rn.errorf("$ref cycle: %q leads back to itself", ref)
		}
		seen[key] = true
		next, err := l.resolve(rn, ref)
		if err != nil {
			return n, err
		}
		n = next
	}
}

// refCycle reports a $ref that leads back to itself through $refs alone
// (a schema that is nothing but a loop); a $ref it cannot follow (to an
// $id, say) is the schema compiler's to resolve.
func (l *loader) refCycle(n node) error {
	seen := map[string]bool{}
	for hops := 0; ; hops++ {
		m, ok := n.v.(map[string]any)
		if !ok {
			return nil
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return nil
		}
		rn, _ := n.child("$ref")
		key := n.src.path + "#" + n.ptr
		if seen[key] || hops >= maxRefHops {
			return rn.errorf("$ref cycle: %q leads back to itself", ref)
		}
		seen[key] = true
		next, err := l.resolve(rn, ref)
		if err != nil {
			return nil
		}
		n = next
	}
}

// resolve finds what ref, written at n, names.
func (l *loader) resolve(n node, ref string) (node, error) {
	file, frag, _ := strings.Cut(ref, "#")
	src := n.src
	if file != "" {
		path, err := refPath(n.src.path, file)
		if err != nil {
			return n, n.errorf("$ref %q: %v", ref, err)
		}
		if src, err = l.load(path); err != nil {
			var de *DocError
			if errors.As(err, &de) {
				return n, err
			}
			return n, n.errorf("$ref %q: %v", ref, err)
		}
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return n, n.errorf("$ref %q: bad escape in the fragment", ref)
	}
	if frag != "" && frag[0] != '/' {
		return n, n.errorf("$ref %q: only JSON pointer fragments (#/...) name objects outside schemas", ref)
	}
	v, ok := src.at(frag)
	if !ok {
		return n, n.errorf("$ref %q: nothing at #%s in %s", ref, frag, src.path)
	}
	return node{src: src, ptr: frag, v: v}, nil
}

// refPath returns the file a $ref's file part names, relative to the file
// it is written in. Only local files: the gateway fetches nothing when it
// loads its config.
func refPath(from, file string) (string, error) {
	u, err := url.Parse(file)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "":
		p, err := url.PathUnescape(u.Path)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(p) {
			return p, nil
		}
		return filepath.Join(filepath.Dir(from), filepath.FromSlash(p)), nil
	case "file":
		return filepath.FromSlash(u.Path), nil
	}
	return "", fmt.Errorf("only local files may be referenced, not %s URLs (download the file beside the document)", u.Scheme)
}
