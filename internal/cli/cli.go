package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Exit statuses shared by all commands.
const (
	exitOK    = 0
	exitUsage = 2
)

// exitStatusHelp ends "retryq help": what scripts may expect of the exit
// status of every command.
const exitStatusHelp = `
Exit status:
  0  success (also a server or a worker stopped by SIGINT, SIGTERM or
     SIGHUP)
  1  failure: the server answered with an error or could not be reached,
     a confirmation was declined, the database or a file could not be used
  2  usage error: an unknown command, a bad flag or argument
"retryq run" exits with its command's status instead; see "retryq help run".
With --json a command prints one JSON document on standard output when it
succeeds, and nothing there when it fails: the message is on standard error.
`

// Env is what a command may touch of the outside world.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads an environment variable (os.Getenv in production).
	Getenv func(key string) string
}

// command is one subcommand.
type command struct {
	name    string
	summary string // one line for "retryq help"
	run     func(ctx context.Context, env *Env, args []string) int
	// subs are the command's own verbs ("types set"), for a command whose
	// run dispatches to them with runSubcommand; "retryq help NAME VERB"
	// prints a verb's help from them.
	subs []subcommand
}

var commands = map[string]*command{}

// register adds a command; it is called from the init function of the
// command's file. Registering a name twice panics.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("cli: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// Main runs the retryq command line with args (without the program name)
// and returns the process exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}
	return env.dispatch(ctx, args)
}

func (env *Env) dispatch(ctx context.Context, args []string) int {
	if len(args) == 0 {
		env.usage(env.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return env.help(ctx, args[1:])
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "retryq: unknown command %q\n\n", args[0])
		env.usage(env.Stderr)
		return exitUsage
	}
	return c.run(ctx, env, args[1:])
}

// help prints the command list, or the help of a command or of one of its
// verbs ("retryq help types set"), the same as "retryq types set -h".
func (env *Env) help(ctx context.Context, args []string) int {
	if len(args) == 0 || (len(args) == 1 && slices.Contains([]string{"help", "-h", "-help", "--help"}, args[0])) {
		env.usage(env.Stdout)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "retryq help: unknown command %q\n\n", args[0])
		env.usage(env.Stderr)
		return exitUsage
	}
	switch {
	case len(args) == 1:
		return c.run(ctx, env, []string{"-h"})
	case len(args) == 2 && len(c.subs) > 0:
		for _, s := range c.subs {
			if s.name == args[1] {
				return s.run(ctx, env, []string{"-h"})
			}
		}
		fmt.Fprintf(env.Stderr, "retryq help: unknown command %q (the commands of %q are %s)\n",
			args[0]+" "+args[1], args[0], strings.Join(subNames(c.subs), ", "))
		return exitUsage
	case len(c.subs) > 0:
		fmt.Fprintf(env.Stderr, "retryq help: unknown command %q\n", strings.Join(args, " "))
		return exitUsage
	default:
		fmt.Fprintf(env.Stderr, "retryq help: unknown command %q (%q has no commands of its own)\n",
			strings.Join(args, " "), args[0])
		return exitUsage
	}
}

func (env *Env) usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	width := 0
	for name := range commands {
		names = append(names, name)
		width = max(width, len(name))
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("retryq: a durable task queue whose core is doing failure right.\n\n")
	b.WriteString("Usage:\n  retryq COMMAND [flags] [args]\n\nCommands:\n")
	for _, name := range names {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, name, commands[name].summary)
	}
	b.WriteString("\nRun \"retryq help COMMAND [VERB]\" or \"retryq COMMAND [VERB] -h\" for a command's flags\n" +
		"(\"retryq help dlq redrive\").\n")
	b.WriteString(exitStatusHelp)
	_, _ = io.WriteString(w, b.String())
}
