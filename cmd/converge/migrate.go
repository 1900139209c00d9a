package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge/migrations"
)

func (e *env) migrateCommand() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{Use: "migrate", Short: "Manage the database schema (ours and River's)"}
	cmd.PersistentFlags().StringVar(&configPath, "config", "", "configuration file (default $CONVERGE_CONFIG)")
	cmd.AddCommand(&cobra.Command{
		Use: "up", Short: "Apply every migration (safe to run concurrently)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadConfig(configPath)
			if err != nil {
				return err
			}
			if err := migrations.Up(cmd.Context(), cfg.DatabaseURL); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "schema is up to date")
			return nil
		},
	}, &cobra.Command{
		Use: "down", Short: "Remove converge's and River's schema", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadConfig(configPath)
			if err != nil {
				return err
			}
			if err := migrations.Down(cmd.Context(), cfg.DatabaseURL); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "schema removed")
			return nil
		},
	}, &cobra.Command{
		Use: "status", Short: "Print the schema version", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadConfig(configPath)
			if err != nil {
				return err
			}
			pool, err := openPool(cmd.Context(), cfg.DatabaseURL, appMode{})
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := migrations.StatusOf(cmd.Context(), pool)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, st.Description)
			if !st.Current() {
				fmt.Fprintln(e.stdout, "pending: run `converge migrate up`")
			}
			return nil
		},
	})
	return cmd
}
