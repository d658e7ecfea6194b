// Command windvane-logfmt-oracle decodes logfmt with github.com/go-logfmt/logfmt, the reference decoder
// windvane's logfmt parser is checked against (tests/connectors/files/test_logfmt_oracle.py).
//
// It reads lines from stdin (each ended by "\n") and writes one JSON line for each: {"pairs": [[key, value],
// ...]} in the order the decoder gives them (a key without value has ""), or {"error": "..."} with the
// decoder's error when it refuses the line. Every line is decoded on its own, as line 1.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"

	"github.com/go-logfmt/logfmt"
)

type result struct {
	Pairs [][2]string `json:"pairs"`
	Error string      `json:"error,omitempty"`
}

func decode(line []byte) result {
	out := result{Pairs: [][2]string{}}
	dec := logfmt.NewDecoderSize(bytes.NewReader(line), len(line)+1)
	for dec.ScanRecord() {
		for dec.ScanKeyval() {
			out.Pairs = append(out.Pairs, [2]string{string(dec.Key()), string(dec.Value())})
		}
	}
	if err := dec.Err(); err != nil {
		out.Error = err.Error()
	}
	return out
}

func main() {
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			if encErr := enc.Encode(decode(bytes.TrimSuffix(line, []byte("\n")))); encErr != nil {
				os.Exit(2)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			os.Exit(2)
		}
	}
}
