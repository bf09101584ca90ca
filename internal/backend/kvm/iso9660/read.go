package iso9660

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// ErrNotISO: the bytes are no ISO 9660 image at all (for a seed volume: its upload never got far).
var ErrNotISO = errors.New("iso: no primary volume descriptor")

// ReadFile returns the contents of a file in the root directory of an ISO 9660 image. It reads what Build
// writes (and plain ISO 9660 from other writers): Rock Ridge names when present, else the ISO 9660
// identifier lower-cased without its version. The kvm backend's ListByTag uses it to tell whose a leftover
// seed volume is.
func ReadFile(img []byte, name string) ([]byte, error) {
	const pvd = 16 * sectorSize
	if len(img) < pvd+sectorSize || string(img[pvd+1:pvd+6]) != "CD001" || img[pvd] != 1 {
		return nil, ErrNotISO
	}
	rootRec := img[pvd+156 : pvd+190]
	start := int(binary.LittleEndian.Uint32(rootRec[2:])) * sectorSize
	size := int(binary.LittleEndian.Uint32(rootRec[10:]))
	if start+size > len(img) {
		return nil, fmt.Errorf("iso: root directory beyond the image")
	}
	dir := img[start : start+size]
	for off := 0; off < len(dir); {
		n := int(dir[off])
		if n == 0 {
			off = (off/sectorSize + 1) * sectorSize // records never cross sectors: skip the padding
			continue
		}
		if off+n > len(dir) || n < 34 {
			return nil, fmt.Errorf("iso: malformed directory record at %d", off)
		}
		rec := dir[off : off+n]
		off += n
		idLen := int(rec[32])
		ident := string(rec[33 : 33+idLen])
		su := rec[33+idLen+(1-idLen%2):]
		if recordName(ident, su) != name || rec[25]&2 != 0 {
			continue
		}
		at := int(binary.LittleEndian.Uint32(rec[2:])) * sectorSize
		length := int(binary.LittleEndian.Uint32(rec[10:]))
		if at+length > len(img) {
			return nil, fmt.Errorf("iso: file %s extends beyond the image (%d bytes read)", name, len(img))
		}
		return img[at : at+length], nil
	}
	return nil, fmt.Errorf("iso: no file %s", name)
}

// recordName is the name a Linux mount shows for a directory record.
func recordName(ident string, systemUse []byte) string {
	for i := 0; i+4 <= len(systemUse); {
		l := int(systemUse[i+2])
		if l < 4 || i+l > len(systemUse) {
			break
		}
		if systemUse[i] == 'N' && systemUse[i+1] == 'M' && l >= 5 {
			return string(systemUse[i+5 : i+l])
		}
		i += l
	}
	ident, _, _ = strings.Cut(ident, ";")
	return strings.ToLower(strings.TrimSuffix(ident, "."))
}
