package testutil

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Sample chooses which rows of a long table a run takes: one row in stride, from an offset drawn once per test
// process and printed, so that one run stays short while runs over time take every row. The environment
// variable env replays a run's choice (the number it printed: offset N mod stride) or, set to "all", takes
// every row. It returns whether row i is taken.
func Sample(t testing.TB, env string, stride int) func(i int) bool {
	t.Helper()
	v := os.Getenv(env)
	if v == "all" || stride <= 1 {
		t.Log("taking every row")
		return func(int) bool { return true }
	}
	draw := sampleDraw
	if v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("%s=%q: want all or the number a run printed", env, v)
		}
		draw = n
	}
	offset := draw % stride
	t.Logf("taking rows i with i %% %d == %d (%s=%d replays this run's choice, =all takes every row)", stride, offset, env, draw)
	return func(i int) bool { return i%stride == offset }
}

// sampleDraw is this process's draw for Sample: the same for every table of the run.
var sampleDraw = int(time.Now().UnixNano() % 1000)
