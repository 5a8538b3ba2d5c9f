package worker

import (
	"os"
	"runtime"
)

// OneProcessor runs the program on one processor unless the GOMAXPROCS
// environment variable says otherwise, and returns how many it runs on.
// Main and MainOnStatusLine call it; a program that calls Run from a main
// of its own may too.
//
// A stage program works one message at a time, and the dispatcher runs
// one such process per PARALLELISM slot: its goroutines (the reader of
// stdin, the writer of stdout, pgx's connection) only hand work to each
// other, and on one processor a hand-off is a switch, not a wake-up of
// another thread (figures: docs/performance-log.md).
func OneProcessor() int {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	return runtime.GOMAXPROCS(0)
}
