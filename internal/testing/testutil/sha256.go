package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
)

// FileSHA256 is the SHA-256 of the file at path as lower-case hex, the form sha256sum prints and
// kvm.image_sha256 takes: the tests that serve an image by URL name its checksum as a user would.
func FileSHA256(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
