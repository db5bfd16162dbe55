// Package cli implements the retryq command line: a dispatcher and one file
// per subcommand.
//
// A subcommand lives in its own file and registers itself from init:
//
//	func init() {
//		register(&command{
//			name:    "server",
//			summary: "run the retryq server",
//			run:     runServer, // func(ctx context.Context, env *Env, args []string) int
//		})
//	}
//
// so new commands never need to edit cli.go. A command with verbs ("types
// set") also lists them in subs, which its run passes to runSubcommand, so
// that "retryq help types set" finds the verb's help. Commands read and
// write only through their *Env, return the process exit status (0
// success, 1 failure, 2 usage error), and parse flags with newFlagSet and
// parseFlags so that -h and bad flags behave the same everywhere.
package cli
