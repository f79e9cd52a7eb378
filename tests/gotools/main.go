// Command gobtool is the Go side of trio-typha's interop tests for Typha's gob protocol.
//
// It uses only Go's encoding/gob, github.com/golang/snappy and this module's own mirror of
// the message shapes (package syncproto).  Subcommands:
//
//	gobtool vectors DIR          write reference byte streams and a manifest.json to DIR
//	gobtool decode [-snappy] F   decode a stream of Envelopes from file F, one JSON line each
//	gobtool client -addr A ...   act as a Typha client against a running server (see client.go)
//	gobtool fleet -addr A -n N   N concurrent clients for the fan-out benchmark (see fleet.go)
//	gobtool server [-ping D]     a Typha sync server driven by JSON lines on stdin (see server.go)
//	gobtool ipstring             net.IP.String of each hex address read from stdin
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gobtool vectors DIR | decode [-snappy] FILE | client -addr HOST:PORT [flags] | fleet -addr HOST:PORT -n N [flags] | server [flags] | ipstring")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "vectors":
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: gobtool vectors DIR")
		} else {
			err = writeVectors(os.Args[2])
		}
	case "decode":
		err = decodeFile(os.Args[2:])
	case "client":
		os.Exit(runClient(os.Args[2:]))
	case "fleet":
		os.Exit(runFleet(os.Args[2:]))
	case "server":
		os.Exit(runServer(os.Args[2:]))
	case "ipstring":
		err = runIPString()
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gobtool:", err)
		os.Exit(1)
	}
}
