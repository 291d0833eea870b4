package vsockdiag

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The Go types against docs/openapi.json: each has exactly its component's properties, and
// a field may be left out (omitempty) only where the document says it may be absent.
func TestTypesMatchTheOpenAPIDocument(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]reflect.Type{
		"Condition":      reflect.TypeOf(Condition{}),
		"SandboxSummary": reflect.TypeOf(SandboxSummary{}),
		"SandboxDetail":  reflect.TypeOf(SandboxDetail{}),
		"Readiness":      reflect.TypeOf(Readiness{}),
		"DumpBrief":      reflect.TypeOf(DumpBrief{}),
		"Error":          reflect.TypeOf(errorBody{}),
		"DumpRequest":    reflect.TypeOf(DumpOptions{}),
	} {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("docs/openapi.json has no component %s", name)
			continue
		}
		fields := jsonFields(typ)
		required := map[string]bool{}
		for _, r := range schema.Required {
			required[r] = true
		}
		var props []string
		for p := range schema.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		var have []string
		for f := range fields {
			have = append(have, f)
		}
		sort.Strings(have)
		if strings.Join(props, ",") != strings.Join(have, ",") {
			t.Errorf("%s: the document has %v, the Go type %v", name, props, have)
		}
		for f, omitempty := range fields {
			// A request's optional fields are left out when unset; an answer's required ones never are.
			if name != "DumpRequest" && omitempty == required[f] {
				t.Errorf("%s.%s: omitempty is %v but the document says required=%v", name, f, omitempty, required[f])
			}
		}
	}
}

// jsonFields lists a struct's JSON names (with its embedded structs'), each with whether
// it is omitempty.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		parts := strings.Split(f.Tag.Get("json"), ",")
		if parts[0] == "" || parts[0] == "-" {
			continue
		}
		omit := false
		for _, p := range parts[1:] {
			omit = omit || p == "omitempty"
		}
		out[parts[0]] = omit
	}
	return out
}
