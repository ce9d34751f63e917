package caddyopenapi

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// discriminator is an OpenAPI discriminator beside a body schema's oneOf
// or anyOf: the value of one property names the schema the object is
// meant to match. Validity stays JSON Schema's (the oneOf decides); the
// discriminator only explains a refusal: the violations of the schema the
// value names, or that the value names none.
type discriminator struct {
	prop    string
	schemas map[string]*jsonschema.Schema // by the property's value
	names   string                        // `"cat", "dog"`, for messages
}

// discriminatorOf compiles the discriminator of the schema at sn, if it
// has one beside a oneOf or anyOf of $refs: the mapping's values, and each
// $ref'd schema under its name (the last segment of the $ref), as OpenAPI
// maps values to schemas.
func (c *compiler) discriminatorOf(sn node) (*discriminator, error) {
	n, err := c.l.deref(sn)
	if err != nil {
		// a $ref to an $id or an anchor: the JSON Schema compiler's to
		// resolve (and it did); such a schema has no discriminator here
		return nil, nil
	}
	dn, ok := n.child("discriminator")
	if !ok {
		return nil, nil
	}
	dm, isObj := dn.v.(map[string]any)
	if !isObj {
		return nil, nil
	}
	prop, _ := dm["propertyName"].(string)
	if prop == "" {
		return nil, dn.errorf("a discriminator needs a propertyName")
	}
	d := &discriminator{prop: prop, schemas: map[string]*jsonschema.Schema{}}
	byRef := map[string]*jsonschema.Schema{}
	for _, kw := range []string{"oneOf", "anyOf"} {
		ln, ok := n.child(kw)
		if !ok {
			continue
		}
		list, _ := ln.v.([]any)
		for i := range list {
			in := ln.index(i)
			im, _ := in.v.(map[string]any)
			ref, _ := im["$ref"].(string)
			if ref == "" {
				continue // an inline schema has no name to map
			}
			sch, err := c.schemaAt(in)
			if err != nil {
				return nil, err
			}
			byRef[ref] = sch
			d.schemas[ref[strings.LastIndexAny(ref, "/#")+1:]] = sch
		}
	}
	if len(byRef) == 0 {
		return nil, nil // discriminator on a base schema (allOf): an annotation
	}
	if mn, ok := dn.child("mapping"); ok {
		mm, _ := mn.v.(map[string]any)
		for _, val := range slices.Sorted(maps.Keys(mm)) {
			ref, _ := mm[val].(string)
			if sch := byRef[ref]; sch != nil {
				d.schemas[val] = sch
				continue
			}
			if !strings.ContainsAny(ref, "/#") { // a schema's name
				if sch := d.schemas[ref]; sch != nil {
					d.schemas[val] = sch
					continue
				}
			}
			vn, _ := mn.child(val)
			target, err := c.l.resolve(vn, ref)
			if err != nil {
				return nil, err
			}
			sch, err := c.schemaAt(target)
			if err != nil {
				return nil, err
			}
			d.schemas[val] = sch
		}
	}
	vals := slices.Sorted(maps.Keys(d.schemas))
	for i, v := range vals {
		vals[i] = strconv.Quote(v)
	}
	d.names = strings.Join(vals, ", ")
	return d, nil
}

// explain returns the violations of a body the schema refused (err),
// read through the discriminator when the body is an object.
func (d *discriminator) explain(v any, err error, prefix string, out []Violation) []Violation {
	obj, ok := v.(map[string]any)
	if d == nil || !ok {
		return collect(err, prefix, out)
	}
	loc := prefix + "/" + escapePointer(d.prop)
	pv, present := obj[d.prop]
	if !present {
		return append(out, Violation{Location: loc, Keyword: "required", Message: "is required"})
	}
	s, _ := pv.(string)
	sch := d.schemas[s]
	if sch == nil {
		return append(out, Violation{Location: loc, Keyword: "discriminator", Message: "must be one of " + d.names})
	}
	if e := validateLib(sch, v); e != nil {
		return collect(e, prefix, out)
	}
	return collect(err, prefix, out) // matches its schema, and another too
}
