package config

import "slices"

// SecretEnvNames returns the names of the environment variables the
// configuration reads secrets from: every source's and notification
// receiver's secret_env and every HTTP target's signing_secret_env, sorted,
// without duplicates. Exec targets remove them from the environment their
// commands inherit (target.ExecConfig.HiddenEnv).
func (c *Config) SecretEnvNames() []string {
	var names []string
	for _, src := range c.Sources {
		if src != nil && src.SecretEnv != "" {
			names = append(names, src.SecretEnv)
		}
	}
	for _, k := range c.Kinds {
		if k != nil && k.Target.HTTP != nil && k.Target.HTTP.SigningSecretEnv != "" {
			names = append(names, k.Target.HTTP.SigningSecretEnv)
		}
	}
	for _, n := range c.Notifications {
		if n != nil && n.SecretEnv != "" {
			names = append(names, n.SecretEnv)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
