// Command rigger reconciles RKE-style Kubernetes clusters from a cluster.yml
// kept in git: it plans and applies node changes over SSH or an agent tunnel,
// keeps etcd snapshots on a schedule and commits each cluster's status back.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rigger/rigger/internal/termsafe"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(printError(os.Stderr, err))
	}
}

// printError prints err as rigger ends with it and returns the exit code.
// Errors quote files and nodes (names, addresses): their control
// characters are escaped, so that none moves the cursor or forges a line.
func printError(w io.Writer, err error) int {
	var ex *exitError
	if errors.As(err, &ex) {
		if ex.msg != "" {
			fmt.Fprintln(w, "error:", termsafe.String(ex.msg))
		}
		return ex.code
	}
	fmt.Fprintln(w, "error:", termsafe.String(err.Error()))
	return 1
}

// exitError ends the program with a given exit code. A command returns it
// when the code carries meaning (validate: invalid file; plan: changes
// pending) and the command has already printed what the user needs.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return fmt.Sprintf("exit status %d", e.code)
}
