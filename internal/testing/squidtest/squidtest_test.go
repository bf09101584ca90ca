package squidtest

import "testing"

// TestFreePortNeverGivesAPortTwice asks for more ports than the kernel's ephemeral range can hand out without
// repeating one by chance (a few thousand of about 28,000: dozens of repeats are expected), and checks that none
// comes back twice.
func TestFreePortNeverGivesAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 3000 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
	}
}
