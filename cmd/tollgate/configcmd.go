package main

import (
	"context"
	"fmt"
	"io"
)

// runConfig is `tollgate config check`: load and validate a config file
// exactly as serve would (strict keys, ${VAR} expansion, Validate) and
// stop. Deployments run it before starting or reloading: the systemd
// unit's ExecStartPre, the Helm chart's test of its rendered ConfigMap.
func runConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, "Usage: tollgate config check --config FILE\n")
		return errUsage
	}
	fs := newFlagSet("config check", "config check --config FILE", stderr)
	cfgPath := fs.String("config", "", "YAML config `file` to check (required)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *cfgPath == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	cfg, err := loadConfig(*cfgPath, "", "", "", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok (listen %s, store %s, %d upstreams)\n", *cfgPath, cfg.Listen, cfg.Store.Backend, len(cfg.Upstreams))
	return nil
}
