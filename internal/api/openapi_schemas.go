package api

// Schema helpers: JSON Schema (OpenAPI 3.1) fragments.

func str(desc string) map[string]any { return withDesc(map[string]any{"type": "string"}, desc) }
func num(desc string) map[string]any { return withDesc(map[string]any{"type": "number"}, desc) }
func integer(desc string) map[string]any {
	return withDesc(map[string]any{"type": "integer"}, desc)
}
func boolean(desc string) map[string]any { return withDesc(map[string]any{"type": "boolean"}, desc) }
func timeT(desc string) map[string]any {
	return withDesc(map[string]any{"type": "string", "format": "date-time"}, desc)
}
func secs(desc string) map[string]any {
	return withDesc(map[string]any{"type": "number", "minimum": 0}, desc+" (seconds, fractions allowed)")
}
func arr(items any) map[string]any   { return map[string]any{"type": "array", "items": items} }
func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
func enum(vals ...string) map[string]any {
	return map[string]any{"type": "string", "enum": vals}
}
func nullable(s map[string]any) map[string]any {
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}
func anyJSON(desc string) map[string]any { return withDesc(map[string]any{}, desc) }

func withDesc(s map[string]any, desc string) map[string]any {
	if desc != "" {
		s["description"] = desc
	}
	return s
}

// obj is a closed object schema (unknown fields are rejected on input).
func obj(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func states() map[string]any {
	return enum("scheduled", "pending", "running", "retry_waiting", "succeeded", "dead", "cancelled")
}

func openAPISchemas() map[string]any {
	errInfo := obj(map[string]any{
		"code":    str("Error code (an HTTP status, a worker-defined code, lease_expired, panic, ...)."),
		"message": str(""),
		"class":   enum("transient", "permanent", "unknown", "lease_expired"),
	}, "code", "message", "class")
	taskProps := func(extra map[string]any) map[string]any {
		p := map[string]any{
			"id":              str("26-character time-ordered id."),
			"type":            str(""),
			"payload":         anyJSON("The task's JSON payload as enqueued."),
			"state":           states(),
			"priority":        integer("Higher runs first."),
			"attempt":         integer("Attempts started so far."),
			"max_attempts":    integer("The task's own limit, else its type policy's."),
			"idempotency_key": nullable(str("")),
			"run_at":          timeT("When the task is (or was) due."),
			"created_at":      timeT(""),
			"updated_at":      timeT(""),
			"last_error":      nullable(ref("ErrorInfo")),
			"dead_reason":     nullable(enum("non_retryable", "max_attempts", "retry_window")),
			"duplicate":       boolean("Present and true when an idempotency key matched an existing task."),
		}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	taskRequired := []string{"id", "type", "payload", "state", "priority", "attempt", "max_attempts", "run_at", "created_at", "updated_at", "last_error"}
	enqueue := obj(map[string]any{
		"type":            str("Task type: letters, digits and _ - . : / (at most 128 bytes)."),
		"payload":         anyJSON("Any JSON value (default null)."),
		"idempotency_key": str("At most 255 bytes; a repeated key returns the existing task."),
		"priority":        integer("-1000000..1000000; default the type's priority."),
		"delay_seconds":   secs("First run after this delay; not with run_at"),
		"run_at":          timeT("First run time; not with delay_seconds."),
		"max_attempts":    integer("0..10000; 0 = the type policy decides."),
	}, "type")
	filterProps := func(extra map[string]any) map[string]any {
		p := map[string]any{
			"type":          str(""),
			"error_code":    str(""),
			"no_error_code": boolean("Only dead tasks whose last error has no code (not with error_code)."),
			"reason":        enum("non_retryable", "max_attempts", "retry_window"),
			"since":         timeT("Died at or after."),
			"ids":           withDesc(arr(str("")), "Only these task ids, at most 10000; not empty (omit it to select by the other fields)."),
			"limit":         integer("At most this many tasks; 0 = no limit."),
		}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	policy := obj(map[string]any{
		"backoff":               enum("fixed", "linear", "exponential", "decorrelated"),
		"initial_delay_seconds": secs("First delay"),
		"multiplier":            num("Growth factor of exponential backoff."),
		"max_delay_seconds":     secs("Cap of every delay"),
		"max_doublings":         integer("Exponential growth turns linear after this many steps; 0 = no limit."),
		"jitter":                enum("none", "proportional", "full", "equal"),
		"jitter_fraction":       num("± fraction of proportional jitter, in (0, 1]."),
		"max_attempts":          integer("Attempts including the first, 1..10000."),
		"retry_window_seconds":  secs("Stop retrying this long after the first failure; 0 = no limit"),
		"retry_on":              arr(str("")),
		"no_retry_on":           arr(str("")),
	})
	target := obj(map[string]any{
		"url":             str("Absolute http or https URL."),
		"method":          withDesc(enum("POST", "PUT", "PATCH", "GET", "DELETE"), "Default POST."),
		"headers":         map[string]any{"type": "object", "additionalProperties": str("")},
		"timeout_seconds": secs("Per-delivery timeout, at most 3600; 0 = the type's timeout_seconds when set, else 30"),
		"concurrency":     integer("Deliveries at once per node, 0..1000; 0 = 16."),
	}, "url")
	statsObj := obj(map[string]any{
		"type":                  str("Absent in the overall block."),
		"counts":                map[string]any{"type": "object", "additionalProperties": integer(""), "description": "Tasks by state."},
		"total":                 integer(""),
		"dlq_size":              integer("Dead tasks."),
		"attempts":              integer("Attempts finished in the window."),
		"retries":               integer("Attempts numbered > 1 finished in the window."),
		"failures":              integer("Failed or lease-expired attempts in the window."),
		"retry_rate":            num("retries / attempts."),
		"mean_retries_per_task": nullable(num("retries / first attempts; 0 when the window holds neither, null when it holds retries but no first attempt.")),
		"retention_deleted": obj(map[string]any{
			"succeeded": integer(""), "cancelled": integer(""), "dead": integer(""),
		}, "succeeded", "cancelled", "dead"),
	}, "counts", "total", "dlq_size", "attempts", "retries", "failures", "retry_rate", "mean_retries_per_task", "retention_deleted")
	return map[string]any{
		"Error": obj(map[string]any{"error": obj(map[string]any{
			"code":       str("Machine-readable code: malformed_json, invalid_field, unauthorized, forbidden, not_found, method_not_allowed, conflict, lease_lost, request_timeout, payload_too_large, unsupported_media_type, internal, unavailable, not_ready, overloaded, storage_full."),
			"message":    str(""),
			"field":      str("The offending field or query parameter, when there is one."),
			"request_id": str("Present on 5xx: find it in the server log."),
		}, "code", "message")}, "error"),
		"Status":         obj(map[string]any{"status": str("")}, "status"),
		"ErrorInfo":      errInfo,
		"Empty":          obj(map[string]any{}),
		"Task":           obj(taskProps(nil), taskRequired...),
		"TaskDetail":     obj(taskProps(map[string]any{"attempts": arr(ref("Attempt"))}), append(taskRequired, "attempts")...),
		"TaskPage":       obj(map[string]any{"tasks": arr(ref("Task")), "next_cursor": nullable(str("Pass as cursor to get the next page; null on the last page."))}, "tasks", "next_cursor"),
		"TaskBatch":      obj(map[string]any{"tasks": arr(ref("Task"))}, "tasks"),
		"EnqueueRequest": enqueue,
		"BatchRequest":   obj(map[string]any{"tasks": withDesc(arr(ref("EnqueueRequest")), "1..1000 tasks.")}, "tasks"),
		"Attempt": obj(map[string]any{
			"number": integer(""), "worker_id": str(""), "started_at": timeT(""), "finished_at": nullable(timeT("")),
			"outcome": enum("succeeded", "failed", "lease_expired"), "error": nullable(ref("ErrorInfo")),
			"delay_seconds": secs("Delay chosen after this attempt"), "detail": str("Stack trace or response excerpt."),
		}, "number", "worker_id", "started_at", "finished_at", "outcome", "error", "delay_seconds", "detail"),
		"RetryPolicy": policy,
		"Target":      target,
		"TypeRequest": obj(map[string]any{
			"retry": ref("RetryPolicy"), "timeout_seconds": secs("Per-attempt timeout, at most 86400; 0 = server default"),
			"priority": integer("Default priority of new tasks."), "target": nullable(ref("Target")),
		}),
		"TypeConfig": obj(map[string]any{
			"type": str(""), "retry": nullable(ref("RetryPolicy")), "timeout_seconds": secs("Per-attempt timeout"),
			"priority": integer(""), "target": nullable(ref("Target")), "updated_at": nullable(timeT("")),
			"stored":     boolean("False when the type was never configured (the values are the defaults)."),
			"unreadable": str("Present when this server cannot decode the stored configuration (one written by a newer version): why. retry is then null; tasks of the type are held back, not run under defaults."),
		}, "type", "retry", "timeout_seconds", "priority", "target", "updated_at", "stored"),
		"TypeList": obj(map[string]any{"types": arr(ref("TypeConfig"))}, "types"),
		"DLQSummary": obj(map[string]any{"groups": arr(obj(map[string]any{
			"type": str(""), "error_code": str(""), "reason": str(""), "count": integer(""), "oldest": timeT(""), "newest": timeT(""),
		}, "type", "error_code", "reason", "count", "oldest", "newest")),
			"total":       integer("Dead tasks in all the matching groups, those past the limit included."),
			"group_count": integer("Matching groups, those past the limit included."),
		}, "groups", "total", "group_count"),
		"DLQFilter":       obj(filterProps(nil)),
		"PurgeRequest":    obj(filterProps(map[string]any{"older_than_seconds": secs("Only tasks dead for at least this long")})),
		"RedriveResponse": obj(map[string]any{"redriven": integer("")}, "redriven"),
		"PurgeResponse":   obj(map[string]any{"purged": integer("")}, "purged"),
		"Stats": obj(map[string]any{"window_seconds": num(""), "overall": statsObj,
			"types":      withDesc(arr(statsObj), "At most limit types, those with the largest totals, in name order."),
			"type_count": integer("Types in all; overall covers every one of them."),
		}, "window_seconds", "overall", "types", "type_count"),
		"NodeList": obj(map[string]any{"nodes": arr(obj(map[string]any{
			"id": str(""), "host": str(""), "version": str(""), "role": enum("leader", "standby", "worker", "stopped"),
			"started_at": timeT(""), "last_seen": timeT(""), "alive": boolean("Seen in the last 30 seconds and not stopped."),
		}, "id", "host", "version", "role", "started_at", "last_seen", "alive")),
			"now": timeT("The registry's time when it answered (the database server's on PostgreSQL): judge last_seen against it, not the client's clock."),
		}, "nodes", "now"),
		"LeaseRequest": obj(map[string]any{
			"worker_id": str("At most 200 bytes."), "types": withDesc(arr(str("")), "Task types this worker runs (1..256; none with a push target)."),
			"max": integer("1..100 (default 1); an answer also stops once its payloads pass 4 MiB (it holds at least one task)."), "wait_seconds": secs("Long-poll up to this long, at most 30 (default 0)"),
			"lease_seconds": secs("Lease length, at most 3600 (default: the longest timeout_seconds of the stored types among them, the server default 300 for one that sets none, at most 3600; 30 when none is stored)"),
		}, "worker_id", "types"),
		"LeaseResponse": obj(map[string]any{"tasks": arr(obj(map[string]any{
			"id": str(""), "type": str(""), "payload": anyJSON(""), "attempt": integer("This attempt's number."),
			"lease_id": str("Pass to heartbeat, complete and fail."), "lease_expires_at": timeT(""),
		}, "id", "type", "payload", "attempt", "lease_id", "lease_expires_at"))}, "tasks"),
		"HeartbeatRequest":  obj(map[string]any{"lease_seconds": secs("New lease length from now, at most 3600 (default: what a lease of the task's type gets without lease_seconds; a heartbeat without it never shortens the lease)")}),
		"HeartbeatResponse": obj(map[string]any{"lease_expires_at": timeT("")}, "lease_expires_at"),
		"CompleteRequest":   obj(map[string]any{"lease_id": str("")}, "lease_id"),
		"CompleteResponse":  obj(map[string]any{"state": enum("succeeded")}, "state"),
		"FailRequest": obj(map[string]any{"lease_id": str(""), "error": obj(map[string]any{
			"code": str("At most 200 bytes. Matched against the policy's retry_on/no_retry_on; HTTP status codes are classified."), "message": str("Required; kept up to 4 KiB."),
			"retryable":           boolean("Omit to let the policy classify the code."),
			"retry_after_seconds": secs("Requested delay, capped by the policy's max delay"),
		}, "message")}, "lease_id", "error"),
		"FailResponse": obj(map[string]any{
			"state": enum("retry_waiting", "pending", "dead"), "next_run_at": timeT("When the retry is due (retry_waiting; pending when that time has already come)."),
			"delay_seconds": secs("The chosen delay (retry_waiting, pending)"), "dead_reason": enum("non_retryable", "max_attempts", "retry_window"),
		}, "state"),
	}
}
