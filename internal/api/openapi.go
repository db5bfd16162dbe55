package api

//go:generate go test -run ^TestOpenAPIFile$ -update .

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
)

// openAPIOp describes one operation of the OpenAPI document.
type openAPIOp struct {
	method, path string
	tag          string
	summary      string
	params       []any  // parameter objects
	body         string // request schema name ("" = none)
	bodyOptional bool
	status       int            // success status
	resp         string         // success schema name
	extra        map[int]string // further success statuses and their schema
	errs         []int          // error statuses besides the common ones
}

var (
	openAPIOnce sync.Once
	openAPIJSON []byte
)

// OpenAPIJSON returns the OpenAPI 3.1 document of the API, indented, as
// served at GET /v1/openapi.json and stored in docs/openapi.json.
func OpenAPIJSON() []byte {
	openAPIOnce.Do(func() {
		b, err := json.MarshalIndent(openAPIDocument(), "", "  ")
		if err != nil {
			panic("api: encode OpenAPI document: " + err.Error())
		}
		b = append(b, '\n')
		openAPIJSON = b
	})
	return openAPIJSON
}

// openAPI handles GET /v1/openapi.json. It needs no token.
func (s *server) openAPI(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(OpenAPIJSON())
	return nil
}

func qp(name, desc string, schema any) any {
	return map[string]any{"name": name, "in": "query", "required": false, "description": desc, "schema": schema}
}

func pp(name, desc string) any {
	return map[string]any{"name": name, "in": "path", "required": true, "description": desc, "schema": str("")}
}

var (
	pID       = pp("id", "Task id.")
	pType     = pp("type", "Task type name (may contain '/').")
	pLease    = pp("lease_id", "Lease id returned by POST /v1/leases.")
	qTypes    = qp("limit", "Most types listed, those with the largest totals, 1..1000 (default 100).", map[string]any{"type": "integer", "minimum": 1, "maximum": 1000})
	qGroups   = qp("limit", "Most groups returned, the largest, 1..1000 (default 100).", map[string]any{"type": "integer", "minimum": 1, "maximum": 1000})
	qLimit    = qp("limit", "Page size, 1..1000 (default 100). A page also stops once its payloads pass 4 MiB (it holds at least one task): page until next_cursor is null.", map[string]any{"type": "integer", "minimum": 1, "maximum": 1000})
	qCursor   = qp("cursor", "next_cursor of the previous page.", str(""))
	qTypeF    = qp("type", "Only tasks of this type.", str(""))
	qSince    = qp("since", "RFC 3339 time: only rows at or after it.", map[string]any{"type": "string", "format": "date-time"})
	qState    = qp("state", "Comma-separated states: "+stateNames()+".", str(""))
	qCode     = qp("error_code", "Only dead tasks whose last error has this code.", str(""))
	qNoCode   = qp("no_error_code", "true: only dead tasks whose last error has no code (not with error_code).", boolean(""))
	qReason   = qp("reason", "Only dead tasks with this dead reason.", enum("non_retryable", "max_attempts", "retry_window"))
	qNodeSnce = qp("since", "RFC 3339 time: nodes seen at or after it (default: one hour ago).", map[string]any{"type": "string", "format": "date-time"})
)

// openAPIOps lists every operation; a test checks it against the routes.
func openAPIOps() []openAPIOp {
	return []openAPIOp{
		{method: "GET", path: "/healthz", tag: "health", summary: "Liveness: the process is up.", status: 200, resp: "Status"},
		{method: "GET", path: "/readyz", tag: "health", summary: "Readiness: the database is reachable, accepts writes, its storage is not full, and its migrations are current; 503 not_ready otherwise, once a SQLite database file was found corrupt (until restored and restarted), and from the start of a stop.", status: 200, resp: "Status", errs: []int{503}},
		{method: "GET", path: "/v1/openapi.json", tag: "meta", summary: "This OpenAPI document (no token needed).", status: 200, resp: ""},

		{method: "POST", path: "/v1/tasks", tag: "tasks", summary: "Enqueue a task. A repeated idempotency key returns the existing task with 200 and duplicate=true.", body: "EnqueueRequest", status: 201, resp: "Task", extra: map[int]string{200: "Task"}},
		{method: "POST", path: "/v1/tasks/batch", tag: "tasks", summary: "Enqueue 1..1000 tasks atomically (all or none).", body: "BatchRequest", status: 201, resp: "TaskBatch"},
		{method: "GET", path: "/v1/tasks", tag: "tasks", summary: "List tasks, newest first.", params: []any{qTypeF, qState, qLimit, qCursor}, status: 200, resp: "TaskPage"},
		{method: "GET", path: "/v1/tasks/{id}", tag: "tasks", summary: "Get a task with its attempt history.", params: []any{pID}, status: 200, resp: "TaskDetail", errs: []int{404}},
		{method: "POST", path: "/v1/tasks/{id}/cancel", tag: "tasks", summary: "Cancel a task that has not finished.", params: []any{pID}, body: "Empty", bodyOptional: true, status: 200, resp: "Task", errs: []int{404, 409}},
		{method: "POST", path: "/v1/tasks/{id}/retry", tag: "tasks", summary: "Retry a dead or cancelled task now (attempts reset, history kept).", params: []any{pID}, body: "Empty", bodyOptional: true, status: 200, resp: "Task", errs: []int{404, 409}},
		{method: "POST", path: "/v1/tasks/{id}/complete", tag: "leases", summary: "Report success of a leased attempt.", params: []any{pID}, body: "CompleteRequest", status: 200, resp: "CompleteResponse", errs: []int{404, 409}},
		{method: "POST", path: "/v1/tasks/{id}/fail", tag: "leases", summary: "Report failure of a leased attempt; returns the retry decision.", params: []any{pID}, body: "FailRequest", status: 200, resp: "FailResponse", errs: []int{404, 409}},

		{method: "GET", path: "/v1/types", tag: "types", summary: "List the stored task-type configurations.", status: 200, resp: "TypeList"},
		{method: "GET", path: "/v1/types/{type}", tag: "types", summary: "Get a type's effective configuration (defaults with stored=false when never configured).", params: []any{pType}, status: 200, resp: "TypeConfig"},
		{method: "PUT", path: "/v1/types/{type}", tag: "types", summary: "Store (replace) a type's configuration.", params: []any{pType}, body: "TypeRequest", status: 200, resp: "TypeConfig"},

		{method: "GET", path: "/v1/dlq", tag: "dlq", summary: "List dead tasks, newest first.", params: []any{qTypeF, qCode, qNoCode, qReason, qSince, qLimit, qCursor}, status: 200, resp: "TaskPage"},
		{method: "GET", path: "/v1/dlq/summary", tag: "dlq", summary: "Dead tasks matching the filter grouped by type, error code and reason, largest group first: at most limit groups; total and group_count count them all.", params: []any{qTypeF, qCode, qNoCode, qReason, qSince, qGroups}, status: 200, resp: "DLQSummary"},
		{method: "POST", path: "/v1/dlq/redrive", tag: "dlq", summary: "Put matching dead tasks back to pending. An empty filter matches every dead task.", body: "DLQFilter", bodyOptional: true, status: 200, resp: "RedriveResponse"},
		{method: "POST", path: "/v1/dlq/purge", tag: "dlq", summary: "Delete matching dead tasks and their history. An empty filter matches every dead task.", body: "PurgeRequest", bodyOptional: true, status: 200, resp: "PurgeResponse"},

		{method: "GET", path: "/v1/stats", tag: "stats", summary: "Counts by state, DLQ size, retry rate and mean retries per task over the last hour, per type and overall.", params: []any{qTypes}, status: 200, resp: "Stats"},
		{method: "GET", path: "/v1/nodes", tag: "stats", summary: "Registered retryq nodes.", params: []any{qNodeSnce}, status: 200, resp: "NodeList"},

		{method: "POST", path: "/v1/leases", tag: "leases", summary: "Lease due tasks to a pull worker, long-polling up to wait_seconds.", body: "LeaseRequest", status: 200, resp: "LeaseResponse"},
		{method: "POST", path: "/v1/leases/{lease_id}/heartbeat", tag: "leases", summary: "Extend a lease.", params: []any{pLease}, body: "HeartbeatRequest", bodyOptional: true, status: 200, resp: "HeartbeatResponse", errs: []int{409}},
	}
}

var errorDescriptions = map[int]string{
	400: "Malformed JSON, unknown or invalid field or query parameter (error.field names it).",
	401: "Missing or invalid bearer token.",
	403: "Read-only token on a mutating route.",
	404: "Unknown id or route.",
	405: "Wrong method (see the Allow header).",
	408: "The request body did not arrive in time; the connection is closed.",
	409: "State conflict (code conflict) or lost lease (code lease_lost).",
	413: "Body larger than the configured limit.",
	415: "Body present but not application/json, or sent with a Content-Encoding other than identity.",
	500: "Internal error; error.request_id identifies it in the server log.",
	503: "Database unavailable (unavailable), its storage full (storage_full), shutting down (unavailable), not ready (not_ready, /readyz), or (POST /v1/leases) too many long polls waiting (overloaded); with Retry-After.",
}

func openAPIDocument() map[string]any {
	paths := map[string]any{}
	for _, op := range openAPIOps() {
		item, _ := paths[op.path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[op.path] = item
		}
		o := map[string]any{
			"summary":     op.summary,
			"tags":        []string{op.tag},
			"operationId": operationID(op),
		}
		if len(op.params) > 0 {
			o["parameters"] = op.params
		}
		resps := map[string]any{}
		content := map[string]any{"description": "OK"}
		if op.resp != "" {
			content["content"] = jsonContent(ref(op.resp))
		} else {
			content["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}
		}
		resps[itoa(op.status)] = content
		for st, schema := range op.extra {
			resps[itoa(st)] = map[string]any{"description": "OK", "content": jsonContent(ref(schema))}
		}
		errs := append([]int{}, op.errs...)
		if strings.HasPrefix(op.path, "/v1/") && !publicPaths[op.path] {
			o["security"] = []any{map[string]any{"bearer": []string{}}}
			errs = append(errs, 401)
			if mutating(op.method) {
				errs = append(errs, 403)
			}
		}
		errs = append(errs, 400, 405, 500)
		if op.body != "" {
			o["requestBody"] = map[string]any{"required": !op.bodyOptional, "content": jsonContent(ref(op.body))}
			errs = append(errs, 408, 413, 415)
		}
		if strings.HasPrefix(op.path, "/v1/") {
			errs = append(errs, 503)
		}
		for _, st := range errs {
			resps[itoa(st)] = map[string]any{"$ref": "#/components/responses/Error" + itoa(st)}
		}
		o["responses"] = resps
		item[strings.ToLower(op.method)] = o
	}
	responses := map[string]any{}
	for st, desc := range errorDescriptions {
		responses["Error"+itoa(st)] = map[string]any{"description": desc, "content": jsonContent(ref("Error"))}
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "retryq API",
			"version": "1",
			"description": "JSON HTTP API of `retryq server`. Times are RFC 3339 (UTC), durations are seconds " +
				"(fractions allowed). When tokens are configured every /v1 route except /v1/openapi.json needs " +
				"`Authorization: Bearer <token>`; read-only tokens may only GET. See docs/api.md.",
		},
		"paths": paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"schemas":         openAPISchemas(),
			"responses":       responses,
		},
	}
}

func operationID(op openAPIOp) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(op.method))
	for _, seg := range strings.Split(op.path, "/") {
		seg = strings.NewReplacer("{", "", "}", "", ".", "_").Replace(seg)
		if seg == "" || seg == "v1" {
			continue
		}
		b.WriteString(strings.ToUpper(seg[:1]) + seg[1:])
	}
	return b.String()
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func jsonContent(schema any) map[string]any {
	return map[string]any{"application/json": map[string]any{"schema": schema}}
}
