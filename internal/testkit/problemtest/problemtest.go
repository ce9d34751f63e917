// Package problemtest checks the gateway's refusals in tests: that a body
// is the problem (RFC 9457, internal/deny) a refusal is, with the members
// the refusal's JSON body had before problem+json.
package problemtest

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/apigate/gateway/internal/deny"
)

// ContentType is the Content-Type of every refusal.
const ContentType = deny.ContentType

// Extends returns nil when body is the problem of a refusal with status
// at instance whose JSON body before problem+json was legacy
// (`{"error":"forbidden","reason":"missing role"}`): those members with
// their values, type and title of the kind legacy's error names, and the
// reason as the detail; else an error that shows both.
func Extends(body string, status int, legacy, instance string) error {
	var want map[string]any
	if err := json.Unmarshal([]byte(legacy), &want); err != nil {
		return fmt.Errorf("the legacy body %s: %v", legacy, err)
	}
	code, _ := want["error"].(string)
	k := deny.KindOf(code, status)
	want["type"], want["title"], want["status"], want["instance"] = k.Type(), k.Title, float64(status), instance
	if reason, ok := want["reason"]; ok {
		want["detail"] = reason
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		return fmt.Errorf("body %q is not JSON: %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		w, _ := json.Marshal(want)
		return fmt.Errorf("body %s\nwant the problem %s", body, w)
	}
	return nil
}

// Body is the exact body of the refusal Extends describes, for tests that
// compare bodies whole: legacy's error and reason (deny.RefusalJSON).
func Body(status int, legacy, instance string) string {
	var m struct{ Error, Reason string }
	if err := json.Unmarshal([]byte(legacy), &m); err != nil {
		return "(not a legacy body: " + legacy + ")"
	}
	return string(deny.RefusalJSON(status, m.Error, m.Reason, instance))
}
