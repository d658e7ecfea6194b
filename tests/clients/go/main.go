// Command windvane-go-client drives github.com/fluent/fluent-logger-golang:
// it sends COUNT events to a Forward server, each with RequestAck if asked,
// and prints a one-line JSON summary. It exits non-zero if any Post failed
// (with RequestAck, a Post fails when its ack does not come back).
//
// Usage: windvane-go-client HOST PORT TAG COUNT MODE [options]
// MODE is "msgpack" (EventTime with nanoseconds, SubSecondPrecision),
// "msgpack-seconds" (integer seconds) or "json" (MarshalAsJSON; integer seconds).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/fluent/fluent-logger-golang/fluent"
)

// What every windvane client driver sends; tests/clients.py computes the
// same values (event_msg, event_time_ns). Keep them in sync.
const (
	baseSeconds = 1700000000
	stepNs      = 1000123 // event i is at baseSeconds s + i * 1.000123 ms
)

func eventMsg(i int) string {
	return fmt.Sprintf("event %06d Grüße Köln température °C 温度センサー ✓ ", i) +
		strings.Repeat(string("xyz"[i%3]), i%50)
}

func eventTime(i int) time.Time {
	return time.Unix(baseSeconds, int64(i)*stepNs)
}

type summary struct {
	Client  string   `json:"client"`
	Version string   `json:"version"`
	Mode    string   `json:"mode"`
	Tag     string   `json:"tag"`
	Count   int      `json:"count"`
	Ack     bool     `json:"ack"`
	TLS     bool     `json:"tls"`
	Sent    int      `json:"sent"`
	Acked   *int     `json:"acked"`
	Seconds float64  `json:"seconds"`
	Errors  []string `json:"errors"`
	OK      bool     `json:"ok"`
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: windvane-go-client HOST PORT TAG COUNT msgpack|msgpack-seconds|json [--ack] [--tls-ca FILE] [--timeout S]")
	os.Exit(2)
}

func libraryVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/fluent/fluent-logger-golang" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func main() {
	if len(os.Args) < 6 {
		usage()
	}
	host, tag, mode := os.Args[1], os.Args[3], os.Args[5]
	port, err1 := strconv.Atoi(os.Args[2])
	count, err2 := strconv.Atoi(os.Args[4])
	if err1 != nil || err2 != nil {
		usage()
	}
	flags := flag.NewFlagSet("windvane-go-client", flag.ExitOnError)
	ack := flags.Bool("ack", false, "RequestAck: wait for the server's ack of every event")
	tlsCA := flags.String("tls-ca", "", "connect with TLS, trusting the certificates in this PEM file")
	timeout := flags.Float64("timeout", 120, "give up (exit 1) after this many seconds")
	flags.Parse(os.Args[6:])

	s := summary{Client: "fluent-logger-golang", Version: libraryVersion(), Mode: mode, Tag: tag,
		Count: count, Ack: *ack, TLS: *tlsCA != "", Errors: []string{}}
	if *ack {
		s.Acked = new(int)
	}
	finish := func() {
		s.OK = len(s.Errors) == 0 && s.Sent == count && (!*ack || *s.Acked == count)
		if len(s.Errors) > 5 {
			s.Errors = s.Errors[:5]
		}
		line, _ := json.Marshal(s)
		fmt.Println(string(line))
		if !s.OK {
			os.Exit(1)
		}
		os.Exit(0)
	}

	config := fluent.Config{
		FluentHost: host,
		FluentPort: port,
		RequestAck: *ack,
		MaxRetry:   1, // a lost ack must fail the run, not be hidden by a resend
		Timeout:    10 * time.Second,
	}
	switch mode {
	case "msgpack":
		config.SubSecondPrecision = true
	case "msgpack-seconds":
	case "json":
		config.MarshalAsJSON = true
	default:
		usage()
	}
	if *tlsCA != "" {
		// The library's TLS config takes no CA pool; Go's system pool reads
		// SSL_CERT_FILE when first used, so point it at the test CA.
		os.Setenv("SSL_CERT_FILE", *tlsCA)
		config.FluentNetwork = "tls"
	}

	started := time.Now()
	go func() {
		time.Sleep(time.Duration(*timeout * float64(time.Second)))
		s.Errors = append(s.Errors, fmt.Sprintf("timed out after %v s", *timeout))
		finish()
	}()
	logger, err := fluent.New(config)
	if err != nil {
		s.Errors = append(s.Errors, err.Error())
		finish()
	}
	for i := 0; i < count; i++ {
		record := map[string]interface{}{"seq": i, "msg": eventMsg(i), "value": float64(i) * 0.5}
		if err := logger.PostWithTime(tag, eventTime(i), record); err != nil {
			s.Errors = append(s.Errors, err.Error())
			break
		}
		s.Sent++
		if *ack {
			*s.Acked++
		}
	}
	if err := logger.Close(); err != nil {
		s.Errors = append(s.Errors, err.Error())
	}
	s.Seconds = time.Since(started).Seconds()
	finish()
}
