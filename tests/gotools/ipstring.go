package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
)

// runIPString reads one hex-encoded 16-byte address per line from stdin and prints Go's
// net.IP.String of each, one per line: the reference for the model's address formatting.
func runIPString() error {
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		b, err := hex.DecodeString(in.Text())
		if err != nil || len(b) != net.IPv6len {
			return fmt.Errorf("bad address line %q", in.Text())
		}
		fmt.Fprintln(out, net.IP(b).String())
	}
	return in.Err()
}
