package caddyclientcert

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/apigate/gateway/internal/planname"
)

// The subject kinds: where in the certificate the subject is read.
const (
	SubjectSANURI = "san_uri" // the first URI SAN (a SPIFFE ID, spiffe://trust-domain/path)
	SubjectSANDNS = "san_dns" // the first DNS SAN
	SubjectCN     = "cn"      // the subject's common name
)

// SubjectOf returns the subject of cert as kind says. A certificate without
// that field is an error saying which field is missing (client-safe).
func SubjectOf(cert *x509.Certificate, kind string) (string, error) {
	switch kind {
	case SubjectSANURI:
		for _, u := range cert.URIs {
			if s := u.String(); s != "" {
				return s, nil
			}
		}
		return "", errors.New("client certificate has no URI SAN")
	case SubjectSANDNS:
		for _, d := range cert.DNSNames {
			if d != "" {
				return d, nil
			}
		}
		return "", errors.New("client certificate has no DNS SAN")
	case SubjectCN:
		if cert.Subject.CommonName != "" {
			return cert.Subject.CommonName, nil
		}
		return "", errors.New("client certificate has no common name")
	}
	return "", fmt.Errorf("unknown subject kind %q", kind)
}

// Fingerprint is the lowercase hex SHA-256 of the certificate's DER bytes
// (what `openssl x509 -fingerprint -sha256` prints, without colons).
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// RoleRule gives Role to the subjects that match one of Subjects: a subject
// written in full matches itself; one that ends with `*` matches every
// subject that starts with what comes before the `*`.
type RoleRule struct {
	// Role is the role given.
	Role string `json:"role"`
	// Subjects are exact subjects or prefixes ending with `*`.
	Subjects []string `json:"subjects"`
}

// checkRules reports the first invalid rule.
func checkRules(rules []RoleRule) error {
	for i, r := range rules {
		if r.Role == "" || strings.ContainsAny(r.Role, " ,\t") {
			return fmt.Errorf("role #%d: invalid role %q: empty or contains a space or comma", i+1, r.Role)
		}
		if err := checkSubjects(fmt.Sprintf("role %q", r.Role), r.Subjects); err != nil {
			return err
		}
	}
	return nil
}

// checkSubjects reports the first invalid subject of a rule (what names
// the rule in the error).
func checkSubjects(what string, subjects []string) error {
	if len(subjects) == 0 {
		return fmt.Errorf("%s: no subject", what)
	}
	for _, s := range subjects {
		if s == "" || s == "*" || strings.Contains(strings.TrimSuffix(s, "*"), "*") {
			return fmt.Errorf("%s: invalid subject %q: a subject, or a prefix ending with a single * (a lone * is not allowed)", what, s)
		}
	}
	return nil
}

// RolesFor returns the roles of subject, in rule order, each once; never
// nil (an identity with no roles has an empty list).
func RolesFor(rules []RoleRule, subject string) []string {
	roles := []string{}
	for _, r := range rules {
		for _, s := range r.Subjects {
			if subjectMatches(s, subject) {
				dup := false
				for _, have := range roles {
					dup = dup || have == r.Role
				}
				if !dup {
					roles = append(roles, r.Role)
				}
				break
			}
		}
	}
	return roles
}

// subjectMatches reports whether a rule's subject (exact, or a prefix
// ending with `*`) matches subject.
func subjectMatches(rule, subject string) bool {
	if p, prefix := strings.CutSuffix(rule, "*"); prefix {
		return strings.HasPrefix(subject, p)
	}
	return subject == rule
}

// PlanRule gives the quota plan Plan to the subjects that match one of
// Subjects (as for RoleRule).
type PlanRule struct {
	// Plan is the quota plan's name.
	Plan string `json:"plan"`
	// Subjects are exact subjects or prefixes ending with `*`.
	Subjects []string `json:"subjects"`
}

// checkPlanRules reports the first invalid plan rule.
func checkPlanRules(rules []PlanRule) error {
	for i, r := range rules {
		if !planname.Valid(r.Plan) {
			return fmt.Errorf("plan #%d: invalid plan %q: use 1 to %d letters, digits, '-' or '_'", i+1, r.Plan, planname.MaxLen)
		}
		if err := checkSubjects(fmt.Sprintf("plan %q", r.Plan), r.Subjects); err != nil {
			return err
		}
	}
	return nil
}

// PlanFor returns the plan of the first rule that matches subject, or "".
func PlanFor(rules []PlanRule, subject string) string {
	for _, r := range rules {
		for _, s := range r.Subjects {
			if subjectMatches(s, subject) {
				return r.Plan
			}
		}
	}
	return ""
}
