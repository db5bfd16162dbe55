package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/retryq/retryq/store/postgres"
	"github.com/retryq/retryq/store/sqlite"
)

func init() {
	register(&command{name: "version", summary: "print this binary's version and the schema versions it knows", run: runVersion})
}

const versionUsage = `Usage: retryq version [--json]

Prints the version this binary records in the node registry (the one
"retryq nodes" shows), the Go toolchain and platform it was built with, and
the newest schema version it knows on each backend: a database migrated
past those is refused, and "retryq migrate" brings an older one up to them.
`

// versionInfo is what "retryq version --json" prints.
type versionInfo struct {
	Version  string `json:"version"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	Schema   struct {
		SQLite   int `json:"sqlite"`
		Postgres int `json:"postgres"`
	} `json:"schema"`
}

func runVersion(_ context.Context, env *Env, args []string) int {
	fs := newFlagSet("version", versionUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	if st, ok := parseFlags(env, fs, args); !ok {
		return st
	}
	if fs.NArg() > 0 {
		return usageError(env, "version", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	var v versionInfo
	v.Version, v.Go, v.Platform = buildVersion(), runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
	v.Schema.SQLite, v.Schema.Postgres = sqlite.KnownVersion(), postgres.KnownVersion()
	if *asJSON {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			fmt.Fprintf(env.Stderr, "retryq version: %v\n", err)
			return 1
		}
		fmt.Fprintf(env.Stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintf(env.Stdout, "retryq %s (%s, %s)\nschema versions known: sqlite %d, postgres %d\n",
		v.Version, v.Go, v.Platform, v.Schema.SQLite, v.Schema.Postgres)
	return exitOK
}
