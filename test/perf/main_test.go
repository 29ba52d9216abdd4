package perf

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The benchmark's empty webhook runs as this binary in a process of
	// its own (startEmptyWebhook).
	if dir := os.Getenv(emptyWebhookEnv); dir != "" {
		err := runEmptyWebhook(dir, os.Getenv(emptyWebhookHostEnv))
		fmt.Fprintln(os.Stderr, "the empty webhook:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
