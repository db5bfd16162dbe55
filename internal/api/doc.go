// Package api serves retryq's JSON HTTP API: enqueueing and inspecting
// tasks, task-type configuration, the dead-letter queue, statistics, the
// node registry and the pull-worker lease protocol. docs/api.md is the
// reference; the OpenAPI 3 document (GET /v1/openapi.json, also written to
// docs/openapi.json) describes every route.
//
// The handler returned by [New] is a plain http.Handler built on the
// standard library's pattern-routing ServeMux. Around the routes it adds, in
// order: a request id (X-Request-Id), panic recovery (500 with the request
// id), bearer-token authentication of /v1 routes ([Auth]), and JSON error
// bodies for unknown routes (404) and wrong methods (405, with Allow).
//
// Every error is {"error": {"code": ..., "message": ...}} with a status
// that says whose fault it was: bad input is always 4xx and names the
// offending field; only server faults are 5xx, and those are logged with
// the request id that the body and the X-Request-Id header carry.
//
// Long-polling lease requests (POST /v1/leases with wait_seconds) may hold
// a request for up to 30 seconds: an http.Server serving this handler needs
// a WriteTimeout above that (or none).
package api
