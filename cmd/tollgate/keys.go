package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/config"
)

// runKeys: tollgate keys hash < key — prints the hex SHA-256 to put in
// auth.keys[].key_sha256 (or api.tokens[].token_sha256), so the key itself
// never has to be written into a config file. The key is read from stdin,
// not an argument, to keep it out of shell history and process lists.
func runKeys(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 1 || args[0] != "hash" {
		fmt.Fprint(stderr, "Usage: tollgate keys hash < key\n\nReads one key or API token on stdin and prints its hex SHA-256,\nfor auth.keys[].key_sha256 or api.tokens[].token_sha256.\n")
		return errUsage
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read key: %w", err)
	}
	// The gateway trims the presented bearer token the same way.
	key := strings.TrimSpace(line)
	if key == "" {
		return errors.New("keys hash: no key on stdin")
	}
	fmt.Fprintln(stdout, config.HashKey(key))
	return nil
}
