package caddyrbac

import (
	"encoding/json"
	"fmt"

	"github.com/apigate/gateway/identity"
)

// MaxValuesPerRule bounds the roles (or scopes) of one `require` line, so
// that an `all` rule can track which ones were seen in a 64-bit mask.
const MaxValuesPerRule = 64

// Result is the outcome of a policy check.
type Result uint8

// Results of Policy.Check. They are also the values of the `result` label
// of the decisions metric (see Result.String).
const (
	// Allow: every rule holds.
	Allow Result = iota
	// DenyRole: a `require` rule does not hold, or the roles claim has
	// the wrong type.
	DenyRole
	// DenyScope: a `require_scope` rule does not hold, or the scopes
	// claim has the wrong type.
	DenyScope
	// Unauthenticated: the request has no verified identity. Policy.Check
	// never returns it; the handler does.
	Unauthenticated
)

var resultNames = [...]string{"allow", "deny_role", "deny_scope", "unauthenticated"}

// String returns the metric label of r.
func (r Result) String() string {
	if int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "unknown"
}

// Reasons given to clients (and to audit) for a denial.
const (
	ReasonMissingIdentity = "missing identity"
	ReasonMissingRole     = "missing role"
	ReasonMissingScope    = "missing scope"
)

// Mode says how the values of a rule combine.
type Mode uint8

const (
	// Any holds when at least one of the rule's values is present.
	Any Mode = iota
	// All holds when every one of the rule's values is present.
	All
)

// String returns "any" or "all".
func (m Mode) String() string {
	if m == All {
		return "all"
	}
	return "any"
}

// ParseMode parses "any" or "all".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "any":
		return Any, nil
	case "all":
		return All, nil
	}
	return Any, fmt.Errorf("invalid mode %q: must be any or all", s)
}

// Rule is one `require` or `require_scope` line.
type Rule struct {
	Mode   Mode
	Values []string
}

// NewRule builds a rule; it needs at least one value and at most
// MaxValuesPerRule. Duplicate values are dropped.
func NewRule(mode Mode, values []string) (Rule, error) {
	var vals []string
	for _, v := range values {
		if v == "" {
			return Rule{}, fmt.Errorf("empty value in %s rule", mode)
		}
		dup := false
		for _, seen := range vals {
			if seen == v {
				dup = true
				break
			}
		}
		if !dup {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return Rule{}, fmt.Errorf("%s rule needs at least one value", mode)
	}
	if len(vals) > MaxValuesPerRule {
		return Rule{}, fmt.Errorf("%s rule has %d values, more than %d: split it into several lines", mode, len(vals), MaxValuesPerRule)
	}
	return Rule{Mode: mode, Values: vals}, nil
}

// Policy is a compiled rbac configuration. It is safe for concurrent use
// and Check does not allocate on any path.
type Policy struct {
	RolesPath  identity.ClaimPath
	ScopesPath identity.ClaimPath
	Roles      []Rule // ANDed
	Scopes     []Rule // ANDed

	roles, scopes ruleSet
}

// ruleSet is the compiled form of the rules on one claim: the distinct
// values of every rule, one bit each, so that one walk over the claim
// value decides every rule.
type ruleSet struct {
	path     identity.ClaimPath
	values   []string // distinct values of all rules
	union    uint64   // one bit per value
	masks    []uint64 // per rule: its values
	all      []bool   // per rule: mode All
	deny     Result
	missing  string
	reasons  typeReasons
	disabled bool // no rules
}

func compileRules(kind string, path identity.ClaimPath, rules []Rule, deny Result, missing string) (ruleSet, error) {
	rs := ruleSet{path: path, deny: deny, missing: missing, reasons: newTypeReasons(kind), disabled: len(rules) == 0}
	for _, r := range rules {
		var mask uint64
		for _, v := range r.Values {
			idx := -1
			for i, have := range rs.values {
				if have == v {
					idx = i
					break
				}
			}
			if idx < 0 {
				if len(rs.values) == MaxValuesPerRule {
					return ruleSet{}, fmt.Errorf("more than %d distinct %s in the rules of one handler", MaxValuesPerRule, kind)
				}
				idx = len(rs.values)
				rs.values = append(rs.values, v)
			}
			mask |= 1 << uint(idx)
		}
		rs.masks = append(rs.masks, mask)
		rs.all = append(rs.all, r.Mode == All)
		rs.union |= mask
	}
	return rs, nil
}

// holds reports whether every rule holds for the values seen. The walk
// also uses it to stop as soon as the answer is known to be yes.
func (rs *ruleSet) holds(seen uint64) bool {
	for i, m := range rs.masks {
		if rs.all[i] {
			if seen&m != m {
				return false
			}
		} else if seen&m == 0 {
			return false
		}
	}
	return true
}

// check decides every rule of the set with one walk over the claim value.
// On a denial it also returns the index of the first rule that does not
// hold (0 when the claim has the wrong type: no rule can hold).
func (rs *ruleSet) check(claims map[string]any) (Result, string, int) {
	if rs.disabled {
		return Allow, "", 0
	}
	v, _ := rs.path.Lookup(claims)
	seen, bad := rs.walk(v)
	if bad {
		return rs.deny, rs.reasons.For(v), 0
	}
	if !rs.holds(seen) {
		return rs.deny, rs.missing, rs.firstFailing(seen)
	}
	return Allow, "", 0
}

// firstFailing returns the index of the first rule that does not hold.
func (rs *ruleSet) firstFailing(seen uint64) int {
	for i, m := range rs.masks {
		if rs.all[i] && seen&m != m || !rs.all[i] && seen&m == 0 {
			return i
		}
	}
	return 0
}

// walk returns the mask of the set's values present in a claim value, and
// whether the value has a type that cannot hold roles. It stops as soon as
// every rule holds.
func (rs *ruleSet) walk(v any) (seen uint64, bad bool) {
	values := rs.values
	switch t := v.(type) {
	case nil:
		return 0, false
	case []any:
		// walked here rather than with EachString so that a non-string
		// element is reported without building an error
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return seen, true
			}
			for i, want := range values {
				if s == want {
					seen |= 1 << uint(i)
					if rs.holds(seen) {
						return seen, false
					}
					break
				}
			}
		}
		return seen, false
	case string, []string:
		_ = identity.EachString(t, func(s string) bool {
			for i, want := range values {
				if s == want {
					seen |= 1 << uint(i)
					return !rs.holds(seen)
				}
			}
			return true
		})
		return seen, false
	default:
		return 0, true
	}
}

// typeReasons holds the client-safe reasons for a claim of each JSON type
// that EachString rejects.
type typeReasons struct {
	number, boolean, object, element, other string
}

func newTypeReasons(kind string) typeReasons {
	base := kind + " claim is "
	tail := ", not a string or an array of strings"
	return typeReasons{
		number:  base + "a number" + tail,
		boolean: base + "a boolean" + tail,
		object:  base + "an object" + tail,
		element: kind + " claim is an array holding a value that is not a string",
		other:   base + "of an unexpected type" + tail,
	}
}

func (t *typeReasons) For(v any) string {
	switch v.(type) {
	case float64, float32, int, int64, int32, uint, uint64, json.Number:
		return t.number
	case bool:
		return t.boolean
	case map[string]any:
		return t.object
	case []any:
		return t.element
	}
	return t.other
}

// NewPolicy compiles a policy. Empty paths take the defaults "roles" and
// "scope".
func NewPolicy(rolesClaim, scopesClaim string, roles, scopes []Rule) (*Policy, error) {
	if rolesClaim == "" {
		rolesClaim = DefaultRolesClaim
	}
	if scopesClaim == "" {
		scopesClaim = DefaultScopesClaim
	}
	rp, err := identity.ParseClaimPath(rolesClaim)
	if err != nil {
		return nil, fmt.Errorf("invalid roles_claim: %v", err)
	}
	sp, err := identity.ParseClaimPath(scopesClaim)
	if err != nil {
		return nil, fmt.Errorf("invalid scopes_claim: %v", err)
	}
	p := &Policy{RolesPath: rp, ScopesPath: sp, Roles: roles, Scopes: scopes}
	if p.roles, err = compileRules("roles", rp, roles, DenyRole, ReasonMissingRole); err != nil {
		return nil, err
	}
	if p.scopes, err = compileRules("scopes", sp, scopes, DenyScope, ReasonMissingScope); err != nil {
		return nil, err
	}
	return p, nil
}

// Defaults of the claim paths.
const (
	DefaultRolesClaim  = "roles"
	DefaultScopesClaim = "scope"
)

// Check evaluates the policy against a verified claim set. It returns
// Allow and an empty reason, or a denial and its client-safe reason. A
// claim of the wrong type denies with a reason naming the type; it never
// panics. Check does not allocate.
func (p *Policy) Check(claims map[string]any) (Result, string) {
	res, reason, _ := p.Decide(claims)
	return res, reason
}

// Decide is Check that also names the rule that denied: its index in
// Roles for DenyRole, in Scopes for DenyScope (0 on Allow). It does not
// allocate.
func (p *Policy) Decide(claims map[string]any) (res Result, reason string, rule int) {
	if res, reason, rule = p.roles.check(claims); res != Allow {
		return res, reason, rule
	}
	return p.scopes.check(claims)
}
