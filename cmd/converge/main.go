package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError marks a command-line mistake (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "converge:", err)
	var u *usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// env is what commands read from the environment and the terminal.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	// problemPrinted is set once a problem body (or, for source test, the
	// verdict that explains the failure, for dlq redrive/discard the bulk
	// answer listing what was skipped) was printed with --json: run
	// then prints no other for the command's error.
	problemPrinted bool
}

// run executes the command line args.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := &env{getenv: getenv, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "converge",
		Short:         "Durable build and deployment events that converge forward",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{&flagParseError{err}} })
	root.AddCommand(
		e.serveCommand("serve", "Run the API, dashboard and workers in one process", true, true),
		e.serveCommand("api", "Run the API and dashboard only", true, false),
		e.serveCommand("worker", "Run the workers only", false, true),
		e.migrateCommand(),
		e.devCommand(),
		e.demoTargetCommand(),
		e.tokenCommand(),
		e.submitCommand(),
		e.dlqCommand(),
		e.workflowCommand(),
		e.runsCommand(),
		e.quarantineCommand(),
		e.auditCommand(),
		e.sourceCommand(),
		e.pruneCommand(),
		e.benchCommand(),
		e.versionCommand(),
	)
	// cobra adds its completion command (bash, fish, powershell, zsh)
	// only when it executes: add it now, so that a bare "converge
	// completion" is a usage error like every other group.
	root.InitDefaultCompletionCmd(args...)
	requireSubcommands(root)
	// "converge help TOPIC" of a topic that is no command is a usage
	// error, as "converge TOPIC" is (cobra's help printed the usage and
	// exited 0).
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			target, _, err := root.Find(args)
			if target == nil || err != nil {
				return &usageError{fmt.Errorf("unknown help topic %q (one of: %s)", strings.Join(args, " "), strings.Join(commandNames(root), ", "))}
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	})
	// A bare "converge" is a usage error like a bare group command, with
	// the help on standard error; --help and "converge help" exit 0.
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		cmd.SetOut(stderr)
		_ = cmd.Help()
		return &usageError{fmt.Errorf("converge needs a command: one of %s", strings.Join(commandNames(cmd), ", "))}
	}
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && cmd != nil && isUsage(err) {
		// With --json, a usage error prints a problem body, as a failed
		// request does (apiClient.do).
		if jsonRequested(cmd, args, err) {
			printProblem(stdout, usageProblem(err))
		}
		var u *usageError
		if !errors.As(err, &u) {
			err = &usageError{err}
		}
		return err
	}
	// With --json, any other failure prints a problem body too (SPEC §4),
	// unless the command printed one (a failed API request).
	if err != nil && cmd != nil && !e.problemPrinted && jsonRequested(cmd, args, err) {
		printProblem(stdout, failureProblem(err))
	}
	return err
}

// isUsage reports whether err is a usage error: converge's own
// (usageError) or one of cobra's, whose messages start with these words.
// Only the start is looked at, so that a failure's text that happens to
// hold them (a dial error's "invalid argument") is not taken for one.
func isUsage(err error) bool {
	var u *usageError
	if errors.As(err, &u) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "required flag", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func (e *env) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(e.stdout, "converge", version)
			return nil
		},
	}
}
