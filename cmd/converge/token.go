package main

import (
	"errors"
	"fmt"
	"regexp"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
)

func (e *env) tokenCommand() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{Use: "token", Short: "Create, list and revoke API tokens"}
	cmd.PersistentFlags().StringVar(&configPath, "config", "", "configuration file (default $CONVERGE_CONFIG)")
	withStore := func(cmd *cobra.Command, fn func(*store.Store) error) error {
		cfg, err := e.loadAdminConfig(configPath)
		if err != nil {
			return err
		}
		pool, err := openPool(cmd.Context(), cfg, appMode{})
		if err != nil {
			return err
		}
		defer pool.Close()
		// Token commands enqueue nothing: an insert-only service, never
		// started.
		svc, err := jobs.NewService(pool, jobs.Config{})
		if err != nil {
			return err
		}
		return fn(svc.Store())
	}
	cli := converge.AuditEntry{Actor: "cli", Role: string(converge.RoleOperator)}

	var name, role string
	create := &cobra.Command{
		Use: "create", Short: "Create a token; its last line of output is the token alone", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := converge.Role(role)
			if !r.Valid() {
				return &usageError{fmt.Errorf("--role must be submitter, viewer or operator")}
			}
			if err := checkTokenName(name); err != nil {
				return &usageError{err}
			}
			return withStore(cmd, func(st *store.Store) error {
				secret, t, err := st.TokenCreate(cmd.Context(), name, r, cli)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stderr, "created token %q with role %s; it is shown once:\n", t.Name, t.Role)
				fmt.Fprintln(e.stdout, secret)
				return nil
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "token name (unique)")
	create.Flags().StringVar(&role, "role", "", "submitter, viewer or operator")
	_ = create.MarkFlagRequired("name")
	_ = create.MarkFlagRequired("role")

	list := &cobra.Command{
		Use: "list", Short: "List tokens (never the tokens themselves)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(st *store.Store) error {
				tokens, err := st.TokenList(cmd.Context())
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tROLE\tCREATED\tLAST USED\tREVOKED")
				for _, t := range tokens {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Role, t.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"),
						fmtTime(t.LastUsedAt), fmtTime(t.RevokedAt))
				}
				return tw.Flush()
			})
		},
	}
	var revokeName string
	revoke := &cobra.Command{
		Use: "revoke [NAME]", Short: "Revoke a token at once (by --name or a NAME argument)", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && revokeName != "" && args[0] != revokeName:
				return &usageError{fmt.Errorf("give the token's name once: --name or an argument")}
			case len(args) == 1:
				revokeName = args[0]
			case revokeName == "":
				return &usageError{fmt.Errorf("name the token to revoke: --name N (or converge token revoke N)")}
			}
			return withStore(cmd, func(st *store.Store) error {
				err := st.TokenRevoke(cmd.Context(), revokeName, cli)
				if errors.Is(err, converge.ErrNotFound) {
					return fmt.Errorf("no active token named %q (see `converge token list`)", revokeName)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "revoked token %q\n", revokeName)
				return nil
			})
		},
	}
	revoke.Flags().StringVar(&revokeName, "name", "", "token name")
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// tokenName is what a token's name may be: it shows in the audit log, in
// `token list` and as the actor of every request made with the token.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$`)

// checkTokenName refuses names that are not 1–100 characters of A-Z a-z 0-9
// . _ : @ - starting with a letter or digit, and "admin", the name of the
// CONVERGE_ADMIN_TOKEN.
func checkTokenName(name string) error {
	if !tokenName.MatchString(name) {
		return fmt.Errorf("--name must be 1 to 100 characters of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit")
	}
	if name == "admin" {
		return fmt.Errorf("--name admin is taken by CONVERGE_ADMIN_TOKEN; choose another name")
	}
	return nil
}
