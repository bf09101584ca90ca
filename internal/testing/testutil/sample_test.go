package testutil

import "testing"

// Sample takes one row in stride, each row exactly once over stride consecutive draws, the replayed draw's
// rows, and every row with "all".
func TestSample(t *testing.T) {
	const env, stride, rows = "EGRESS_TEST_SAMPLE_SELF", 3, 10
	taken := make([]int, rows)
	for draw := range stride {
		t.Setenv(env, string(rune('0'+draw)))
		keep := Sample(t, env, stride)
		n := 0
		for i := range rows {
			if keep(i) {
				taken[i]++
				n++
			}
		}
		if n < rows/stride || n > rows/stride+1 {
			t.Errorf("draw %d took %d of %d rows, want about one in %d", draw, n, rows, stride)
		}
	}
	for i, n := range taken {
		if n != 1 {
			t.Errorf("row %d taken by %d of %d consecutive draws, want exactly one", i, n, stride)
		}
	}
	t.Setenv(env, "all")
	all := Sample(t, env, stride)
	for i := range rows {
		if !all(i) {
			t.Errorf("with all, row %d is not taken", i)
		}
	}
}
