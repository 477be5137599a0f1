package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// ListenTLS names the PEM files the listener serves TLS from: the
// certificate (its chain after it, as web servers take it) and its private
// key. Both or neither. They are read at start; a renewed certificate is
// picked up by a restart.
type ListenTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether TLS was asked for.
func (t ListenTLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Load reads the key pair into a server TLS configuration (TLS 1.2 at
// least; HTTP/2 is offered by the server that uses it). Every error names
// the YAML field at fault, under path (e.g. "listen_tls").
func (t ListenTLS) Load(path string) (*tls.Config, error) {
	switch {
	case t.CertFile == "":
		return nil, fmt.Errorf("%s.cert_file: required with %s.key_file", path, path)
	case t.KeyFile == "":
		return nil, fmt.Errorf("%s.key_file: required with %s.cert_file", path, path)
	}
	certPEM, err := readRegular(t.CertFile)
	if err != nil {
		return nil, fmt.Errorf("%s.cert_file: %w", path, err)
	}
	keyPEM, err := readRegular(t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s.key_file: %w", path, err)
	}
	// Check the certificate alone first, so that a key file given as the
	// certificate (or a corrupt one) is blamed on the right field.
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s.cert_file: no PEM CERTIFICATE block in %s", path, t.CertFile)
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return nil, fmt.Errorf("%s.cert_file: %s: %w", path, t.CertFile, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s.key_file: %s: %w", path, t.KeyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// readRegular reads a regular file of at most 1 MiB: a device or a pipe
// named by mistake (/dev/stdin, /dev/zero) would otherwise block or never
// end at start.
func readRegular(name string) ([]byte, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	if fi.Size() > 1<<20 {
		return nil, fmt.Errorf("%s: %d bytes, more than a PEM file of 1 MiB", name, fi.Size())
	}
	return os.ReadFile(name)
}
