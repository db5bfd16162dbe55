package main

import (
	"context"
	"os"

	"github.com/retryq/retryq/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
