package caddyopenapi

import (
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A format the gateway does not know would pass every value unchecked:
// the JSON Schema library leaves a format it does not know out of the
// schema it compiles. A document naming one ("uuidd" for "uuid") fails
// the load, with the file, line and JSON pointer of the keyword.

// assertedFormats are the formats whose values are checked: the JSON
// Schema library's (v6.0.3; TestFormatNames checks the list against
// it), regex, and OpenAPI's int32 and int64.
var assertedFormats = []string{
	"date", "date-time", "duration", "email", "hostname", "int32", "int64", "ipv4", "ipv6", "iri",
	"iri-reference", "json-pointer", "period", "regex", "relative-json-pointer", "semver", "time", "uri",
	"uri-reference", "uri-template", "uuid",
}

// annotationFormats are formats JSON Schema or the OpenAPI Format
// Registry defines that the gateway does not check: they describe a
// value (float, password, binary) or are not checked here (idn-email,
// idn-hostname).
var annotationFormats = []string{
	"base64url", "binary", "byte", "char", "commonmark", "date-time-local", "decimal", "decimal128", "double",
	"float", "html", "http-date", "idn-email", "idn-hostname", "int16", "int8", "media-range", "password",
	"sf-binary", "sf-boolean", "sf-decimal", "sf-integer", "sf-string", "sf-token", "time-local", "uint16",
	"uint32", "uint64", "uint8",
}

func knownFormat(name string) bool {
	return slices.Contains(assertedFormats, name) || slices.Contains(annotationFormats, name)
}

// errUnknownFormat is the check of a format the gateway does not know,
// registered so that the compiled schema says where it is used.
func errUnknownFormat(any) error { return errUnknown }

var errUnknown = errorString("unknown format")

type errorString string

func (e errorString) Error() string { return string(e) }

// noteFormats registers, as unknown, each format named in a file that
// the gateway does not know (a "format" member of a string value,
// wherever it is: only the schemas' count, checkFormats finds them).
func (c *compiler) noteFormats(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if name, ok := e.(string); ok && k == "format" && !knownFormat(name) && !slices.Contains(c.ownFormats, name) && !c.unknown[name] {
				c.unknown[name] = true
				c.schemas.RegisterFormat(&jsonschema.Format{Name: name, Validate: errUnknownFormat})
			}
			c.noteFormats(e)
		}
	case []any:
		for _, e := range t {
			c.noteFormats(e)
		}
	}
}

// noteFiles notes the formats of the files read since the last call.
func (c *compiler) noteFiles() {
	for ; c.noted < len(c.l.order); c.noted++ {
		c.noteFormats(c.l.files[c.l.order[c.noted]].root)
	}
}

// checkFormats fails on a schema, reached from sch, whose format the
// gateway does not know: of several, the first in the document (the
// walk meets properties in a map's order), so the load names the same
// one every time.
func (c *compiler) checkFormats(at node, sch *jsonschema.Schema) error {
	var first *DocError
	var walk func(s *jsonschema.Schema)
	walk = func(s *jsonschema.Schema) {
		if c.formatsChecked[s] {
			return
		}
		c.formatsChecked[s] = true
		if s.Format != nil && c.unknown[s.Format.Name] {
			n := at
			if src, ptr, ok := c.place(s.Location); ok {
				n = node{src: src, ptr: ptr}
			}
			n.ptr += "/format"
			e := n.errorf("unknown format %q: neither JSON Schema nor OpenAPI defines it, so its values would not be checked "+
				"(a format of the document's own can be named in annotation_formats; known: %s)",
				s.Format.Name, strings.Join(append(slices.Clone(assertedFormats), annotationFormats...), ", "))
			if first == nil || e.File < first.File || e.File == first.File && e.Line < first.Line {
				first = e
			}
		}
		for _, sub := range children(s, false) {
			walk(sub)
		}
	}
	walk(sch)
	if first == nil {
		return nil
	}
	return first
}
