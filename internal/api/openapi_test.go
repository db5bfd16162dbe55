package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/openapi.json")

var openAPIFile = filepath.Join("..", "..", "docs", "openapi.json")

// TestOpenAPIFile keeps docs/openapi.json identical to the served document
// (go generate ./internal/api rewrites it).
func TestOpenAPIFile(t *testing.T) {
	want := OpenAPIJSON()
	if *update {
		if err := os.WriteFile(openAPIFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatalf("%v (run go generate ./internal/api)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go generate ./internal/api", openAPIFile)
	}
}

// TestOpenAPIRoutes checks that every registered route is documented and
// every documented operation is registered.
func TestOpenAPIRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	r := e.must(http.StatusOK, "GET", "/v1/openapi.json", nil)
	if err := json.Unmarshal(r.raw, &doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("document: %v, openapi %q", err, doc.OpenAPI)
	}
	if !bytes.Equal(r.raw, OpenAPIJSON()) {
		t.Fatal("served document differs from OpenAPIJSON()")
	}
	var documented, registered []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	for _, rt := range e.srv.routes {
		registered = append(registered, rt.method+" "+strings.ReplaceAll(rt.pattern, "...}", "}"))
	}
	sort.Strings(documented)
	sort.Strings(registered)
	if strings.Join(documented, "\n") != strings.Join(registered, "\n") {
		t.Fatalf("documented:\n%s\n\nregistered:\n%s", strings.Join(documented, "\n"), strings.Join(registered, "\n"))
	}
	// Every $ref resolves.
	raw := string(OpenAPIJSON())
	var full map[string]any
	_ = json.Unmarshal(OpenAPIJSON(), &full)
	schemas := full["components"].(map[string]any)["schemas"].(map[string]any)
	responses := full["components"].(map[string]any)["responses"].(map[string]any)
	for _, part := range strings.Split(raw, `"$ref": "`)[1:] {
		ref := part[:strings.IndexByte(part, '"')]
		switch {
		case strings.HasPrefix(ref, "#/components/schemas/"):
			if schemas[strings.TrimPrefix(ref, "#/components/schemas/")] == nil {
				t.Errorf("dangling %s", ref)
			}
		case strings.HasPrefix(ref, "#/components/responses/"):
			if responses[strings.TrimPrefix(ref, "#/components/responses/")] == nil {
				t.Errorf("dangling %s", ref)
			}
		default:
			t.Errorf("unexpected ref %s", ref)
		}
	}
}
