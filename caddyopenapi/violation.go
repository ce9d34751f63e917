package caddyopenapi

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/apigate/gateway/identity"
)

var printer = message.NewPrinter(language.English)

// Violation is one way a request (or a response) does not match the
// document: where, which schema keyword (or OpenAPI rule), and what was
// expected. Messages say what the document expects, never the value the
// client sent (a header or cookie may be a secret).
//
// Location is "path.<name>", "query.<name>", "header.<Name>",
// "cookie.<name>", "body" with the JSON pointer into the body
// ("body/items/0/price"), "security", "path" or "method" (undeclared), or
// for responses "response.status", "response.header.<Name>",
// "response.body/...". Keyword is the JSON Schema keyword ("maximum",
// "required", "type") or the OpenAPI rule ("content-type", "style",
// "security", "paths", "methods", "responses").
type Violation = identity.OpenAPIViolation

// maxViolations bounds the violations one answer lists.
const maxViolations = 20

// collect adds the violations of a schema validation error: its leaves,
// each at its place in the value (prefix plus the instance location).
func collect(err error, prefix string, out []Violation) []Violation {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		msg := "is invalid"
		if err == errUncheckable {
			msg = "cannot be checked against the schema"
		}
		return append(out, Violation{Location: prefix, Keyword: "schema", Message: msg})
	}
	start := len(out)
	out = collectErr(ve, prefix, out)
	// the validator walks properties in map order: sorted, an answer is
	// the same from one request to the next
	sort.SliceStable(out[start:], func(i, j int) bool {
		a, b := out[start+i], out[start+j]
		if a.Location != b.Location {
			return a.Location < b.Location
		}
		return a.Keyword < b.Keyword
	})
	return out
}

func collectErr(e *jsonschema.ValidationError, prefix string, out []Violation) []Violation {
	if len(out) >= maxViolations {
		return out
	}
	loc := location(prefix, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf:
		if len(e.Causes) == 0 {
			return append(out, Violation{Location: loc, Keyword: "schema", Message: "is invalid"})
		}
		for _, c := range e.Causes {
			out = collectErr(c, prefix, out)
		}
		return out
	case *kind.Required:
		for _, p := range k.Missing {
			out = append(out, Violation{Location: loc + "/" + escapePointer(p), Keyword: "required", Message: "is required"})
		}
		return out
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			out = append(out, Violation{Location: loc + "/" + escapePointer(p), Keyword: "additionalProperties", Message: "is not allowed"})
		}
		return out
	case *kind.DependentRequired:
		for _, p := range k.Missing {
			out = append(out, Violation{Location: loc + "/" + escapePointer(p), Keyword: "dependentRequired", Message: "is required when " + k.Prop + " is present"})
		}
		return out
	case *kind.Dependency:
		for _, p := range k.Missing {
			out = append(out, Violation{Location: loc + "/" + escapePointer(p), Keyword: "dependencies", Message: "is required when " + k.Prop + " is present"})
		}
		return out
	}
	kw, msg := describe(e.ErrorKind)
	return append(out, Violation{Location: loc, Keyword: kw, Message: msg})
}

func location(prefix string, inst []string) string {
	if len(inst) == 0 {
		return prefix
	}
	var b strings.Builder
	b.WriteString(prefix)
	for _, t := range inst {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

// describe names the keyword of an error and says what it expects,
// without the value that failed.
func describe(ek jsonschema.ErrorKind) (keyword, msg string) {
	switch k := ek.(type) {
	case *kind.Type:
		return "type", "must be " + strings.Join(k.Want, " or ") + ", not " + k.Got
	case *kind.Enum:
		return "enum", "must be one of " + values(k.Want)
	case *kind.Const:
		return "const", "must be " + values([]any{k.Want})
	case *kind.Format:
		return "format", "must be a valid " + k.Want
	case *kind.MinProperties:
		return "minProperties", fmt.Sprintf("must have at least %d properties", k.Want)
	case *kind.MaxProperties:
		return "maxProperties", fmt.Sprintf("must have at most %d properties", k.Want)
	case *kind.MinItems:
		return "minItems", fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		return "maxItems", fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.AdditionalItems:
		return "additionalItems", fmt.Sprintf("must have no items after the %d described", k.Count)
	case *kind.PropertyNames:
		return "propertyNames", "has a property name the schema does not allow"
	case *kind.UniqueItems:
		return "uniqueItems", fmt.Sprintf("must have unique items (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		return "contains", "must contain an item matching the schema"
	case *kind.MinContains:
		return "minContains", fmt.Sprintf("must contain at least %d items matching the schema", k.Want)
	case *kind.MaxContains:
		return "maxContains", fmt.Sprintf("must contain at most %d items matching the schema", k.Want)
	case *kind.MinLength:
		return "minLength", fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return "maxLength", fmt.Sprintf("must be at most %d characters long", k.Want)
	case *kind.Pattern:
		return "pattern", "must match the pattern " + k.Want
	case *kind.ContentEncoding:
		return "contentEncoding", "must be encoded as " + k.Want
	case *kind.ContentMediaType:
		return "contentMediaType", "must be of media type " + k.Want
	case *kind.ContentSchema:
		return "contentSchema", "must have content matching the schema"
	case *kind.Minimum:
		return "minimum", "must be >= " + rat(k.Want)
	case *kind.Maximum:
		return "maximum", "must be <= " + rat(k.Want)
	case *kind.ExclusiveMinimum:
		return "exclusiveMinimum", "must be > " + rat(k.Want)
	case *kind.ExclusiveMaximum:
		return "exclusiveMaximum", "must be < " + rat(k.Want)
	case *kind.MultipleOf:
		return "multipleOf", "must be a multiple of " + rat(k.Want)
	case *kind.FalseSchema:
		return "false", "is not allowed"
	case *kind.Not:
		return "not", "must not match the schema"
	case *kind.AnyOf:
		return "anyOf", "must match at least one of the schemas"
	case *kind.OneOf:
		if len(k.Subschemas) > 1 {
			return "oneOf", fmt.Sprintf("must match exactly one of the schemas, not %d", len(k.Subschemas))
		}
		return "oneOf", "must match exactly one of the schemas"
	case *kind.RefCycle:
		return "$ref", "cannot be checked: the schema's $refs loop"
	case *kind.InvalidJsonValue:
		return "type", "must be a JSON value"
	}
	kw := ""
	if p := ek.KeywordPath(); len(p) > 0 {
		kw = p[0]
	}
	return kw, "does not match the schema"
}

// values writes a schema's expected values (from the document, never the
// client's), shortened.
func values(vs []any) string {
	var b strings.Builder
	for i, v := range vs {
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len() > 200 {
			b.WriteString("...")
			break
		}
		switch t := v.(type) {
		case string:
			b.WriteString(strconv.Quote(t))
		case nil:
			b.WriteString("null")
		case map[string]any, []any:
			b.WriteString("the value in the schema")
		default:
			fmt.Fprint(&b, t)
		}
	}
	return b.String()
}

func rat(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// errUncheckable: the JSON Schema library could not check a value (it
// panicked: a number big.Rat does not take against a bound, an email
// domain of one bracket); the value is refused.
var errUncheckable = errors.New("cannot be checked")

// validateLib validates v with the JSON Schema library.
func validateLib(sch *jsonschema.Schema, v any) (err error) {
	defer func() {
		if recover() != nil {
			err = errUncheckable
		}
	}()
	return sch.Validate(v)
}
