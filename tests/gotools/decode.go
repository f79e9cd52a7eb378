package main

import (
	"encoding/gob"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/golang/snappy"
	sp "triotypha.test/gotools/syncproto"
)

// decodeFile decodes every Envelope in a file the way a Typha client's decoder would and
// prints one JSON line per message; a decode error is printed as {"error": ...}.
func decodeFile(args []string) error {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	useSnappy := fs.Bool("snappy", false, "the file is a snappy framed stream")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: gobtool decode [-snappy] FILE")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if *useSnappy {
		r = snappy.NewReader(f)
	}
	dec := gob.NewDecoder(r)
	out := json.NewEncoder(os.Stdout)
	for {
		var env sp.Envelope
		err := dec.Decode(&env)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			_ = out.Encode(map[string]any{"error": err.Error()})
			os.Exit(1)
		}
		if err := out.Encode(describe(env.Message)); err != nil {
			return err
		}
	}
}
