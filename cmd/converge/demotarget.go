package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge/demotarget"
)

func (e *env) demoTargetCommand() *cobra.Command {
	var listen string
	var opts demotarget.Options
	cmd := &cobra.Command{
		Use:   "demo-target",
		Short: "Run an HTTP target that simulates builds with latency and failures",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDemoOptions(opts, ""); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			fmt.Fprintf(e.stdout, "demo target listening on http://%s (latency %s, transient %.2f, permanent %.2f)\n",
				ln.Addr(), opts.Latency, opts.TransientRate, opts.PermanentRate)
			return serveUntilDone(cmd.Context(), ln, demotarget.New(opts))
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9000", "address to listen on")
	cmd.Flags().DurationVar(&opts.Latency, "latency", 200*time.Millisecond, "mean latency of a call")
	cmd.Flags().Float64Var(&opts.TransientRate, "transient", 0.1, "share of calls that fail transiently (503)")
	cmd.Flags().Float64Var(&opts.PermanentRate, "permanent", 0.02, "share of calls that fail permanently (422)")
	return cmd
}

// serveUntilDone serves h on ln until ctx ends.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errc:
		return err
	}
}

// checkDemoOptions is a usage error for demo target options out of range
// (SPEC §8: a bad flag value exits 2): a negative latency, or rates that
// are not from 0 to 1 or sum over 1. prefix is that of the flags' names:
// "" for demo-target, "demo-" for dev.
func checkDemoOptions(opts demotarget.Options, prefix string) error {
	if opts.Latency < 0 {
		return &usageError{fmt.Errorf("--%slatency must not be negative", prefix)}
	}
	if opts.TransientRate < 0 || opts.PermanentRate < 0 || opts.TransientRate+opts.PermanentRate > 1 {
		return &usageError{fmt.Errorf("--%stransient and --%spermanent are rates from 0 to 1 whose sum is at most 1", prefix, prefix)}
	}
	return nil
}
