// Command go-duration says what Go's time.ParseDuration makes of each line
// of its standard input: "NANOS STRING" (the int64 nanoseconds and their
// time.Duration.String) or "error MESSAGE" (the error, as Go writes it).
// One output line per input line, in order.
//
// With -hex each input line is the candidate's bytes in hexadecimal, so a
// candidate may hold a newline, a carriage return or any other byte.
//
// iar's differential test (crates/core/src/duration/tests.rs) builds it
// and compares iar_core::duration with it; by hand:
//
//	printf '0\n+5m\n1μs\n' | go run .
package main

import (
	"bufio"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	hexLines := flag.Bool("hex", false, "each line is the candidate's bytes in hexadecimal")
	flag.Parse()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		s := in.Text()
		if *hexLines {
			b, err := hex.DecodeString(s)
			if err != nil {
				fmt.Fprintf(os.Stderr, "go-duration: line %q is not hex: %v\n", s, err)
				os.Exit(2)
			}
			s = string(b)
		}
		if d, err := time.ParseDuration(s); err != nil {
			fmt.Fprintf(out, "error %s\n", err)
		} else {
			fmt.Fprintf(out, "%d %s\n", int64(d), d)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "go-duration: reading stdin: %v\n", err)
		os.Exit(2)
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "go-duration: writing stdout: %v\n", err)
		os.Exit(2)
	}
}
