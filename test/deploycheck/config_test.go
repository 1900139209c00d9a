package deploycheck

import (
	"fmt"

	"github.com/converge-run/converge/config"
)

// checkConvergeConfig reads a shipped configuration file the way converge does
// (config.Parse decodes strictly, so a misspelt key is an error; Finish fills the
// defaults and validates) and returns it with what is wrong with it.
func checkConvergeConfig(data []byte) (*config.Config, []string) {
	cfg, err := config.Parse(data)
	if err != nil {
		return nil, []string{fmt.Sprintf("converge config: %v", err)}
	}
	if err := cfg.Finish(); err != nil {
		return nil, []string{fmt.Sprintf("converge config: %v", err)}
	}
	return cfg, nil
}
