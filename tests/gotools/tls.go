package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"
)

// tlsFlags are the client's TLS settings, as calico-node's Typha client takes them: a CA
// to verify the server with, a client certificate and key, and the server's expected name.
type tlsFlags struct {
	ca, cert, key, serverName *string
}

func addTLSFlags(fs *flag.FlagSet) tlsFlags {
	return tlsFlags{
		ca:         fs.String("ca", "", "CA file: connect with TLS, verifying the server"),
		cert:       fs.String("cert", "", "client certificate file (with -key)"),
		key:        fs.String("key", "", "client key file"),
		serverName: fs.String("server-name", "", "name the server's certificate must have"),
	}
}

// config returns nil when no TLS is asked for.
func (f tlsFlags) config() (*tls.Config, error) {
	if *f.ca == "" {
		if *f.cert != "" || *f.key != "" {
			return nil, errors.New("-cert/-key need -ca")
		}
		return nil, nil
	}
	pem, err := os.ReadFile(*f.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate found", *f.ca)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: *f.serverName, MinVersion: tls.VersionTLS12}
	if *f.cert != "" {
		pair, err := tls.LoadX509KeyPair(*f.cert, *f.key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// dial connects to addr, with TLS (handshake done) when cfg is not nil.
func dial(addr string, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	if cfg == nil {
		return net.DialTimeout("tcp", addr, timeout)
	}
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, cfg)
}
