// Package iso9660 writes and reads the small ISO 9660 images a NoCloud seed disk needs: a few files in the
// root directory, in memory, with Rock Ridge names so a Linux mount shows them as written. It is no general
// ISO 9660 library: no subdirectories, no Joliet, no El Torito.
package iso9660

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Build writes an ISO 9660 image holding files in its root directory, labelled label, entirely in memory.
// Names are stored twice: as ISO 9660 identifiers (upper case, ";1", which Linux shows lower case without the
// version) and as Rock Ridge NM entries carrying the exact name, which is what cloud-init's NoCloud reader
// looks up. The layout is fixed and tiny, which is all a seed disk needs:
//
//	sectors 0-15 system area, 16 primary volume descriptor, 17 terminator, 18 L path table,
//	19 M path table, 20 root directory, 21... file data, each file starting on its own sector.
func Build(label string, files map[string][]byte, at time.Time) ([]byte, error) {
	const rootSector = 20
	names := make([]string, 0, len(files))
	for n := range files {
		if n == "" || strings.ContainsAny(n, "/;") || len(n) > 30 {
			return nil, fmt.Errorf("iso: file name %q must be 1 to 30 characters without '/' or ';'", n)
		}
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return isoIdent(names[i]) < isoIdent(names[j]) })
	if len(label) > 32 {
		return nil, fmt.Errorf("iso: volume label %q is longer than 32 characters", label)
	}

	// File extents follow the root directory.
	type extent struct{ sector, size uint32 }
	extents := make([]extent, len(names))
	next := uint32(rootSector + 1)
	for i, n := range names {
		size := uint32(len(files[n]))
		extents[i] = extent{next, size}
		next += sectorsFor(size)
	}
	total := next

	var root bytes.Buffer
	root.Write(dirRecord([]byte{0}, rootSector, sectorSize, true, at, append(suspSP(), rrPX(0o40555, 2)...)))
	root.Write(dirRecord([]byte{1}, rootSector, sectorSize, true, at, rrPX(0o40555, 2)))
	for i, n := range names {
		su := append(rrPX(0o100444, 1), rrNM(n)...)
		root.Write(dirRecord([]byte(isoIdent(n)), extents[i].sector, extents[i].size, false, at, su))
	}
	if root.Len() > sectorSize {
		return nil, fmt.Errorf("iso: %d files do not fit one directory sector", len(names))
	}

	img := make([]byte, int(total)*sectorSize)
	copy(img[16*sectorSize:], primaryDescriptor(label, total, rootSector, at))
	term := img[17*sectorSize:]
	term[0] = 255
	copy(term[1:6], "CD001")
	term[6] = 1
	copy(img[18*sectorSize:], pathTable(rootSector, binary.LittleEndian))
	copy(img[19*sectorSize:], pathTable(rootSector, binary.BigEndian))
	copy(img[rootSector*sectorSize:], root.Bytes())
	for i, n := range names {
		copy(img[int(extents[i].sector)*sectorSize:], files[n])
	}
	return img, nil
}

const sectorSize = 2048

func sectorsFor(size uint32) uint32 {
	n := (size + sectorSize - 1) / sectorSize
	if n == 0 {
		return 1 // an empty file still gets its own (empty) sector: simpler, and readers do not mind
	}
	return n
}

// isoIdent is the plain ISO 9660 identifier of a name.
func isoIdent(name string) string { return strings.ToUpper(name) + ";1" }

// both encodes v in the "both-endian" form ISO 9660 uses: little-endian, then big-endian.
func both32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}

func both16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

func dirRecord(ident []byte, sector, size uint32, dir bool, at time.Time, systemUse []byte) []byte {
	n := 33 + len(ident)
	if n%2 == 1 {
		n++ // the identifier is padded so system use starts on an even offset
	}
	recLen := n + len(systemUse)
	if recLen%2 == 1 {
		recLen++ // a record's length is even: a padding byte ends it
	}
	r := make([]byte, recLen)
	r[0] = byte(len(r))
	both32(r[2:], sector)
	both32(r[10:], size)
	u := at.UTC()
	copy(r[18:25], []byte{byte(u.Year() - 1900), byte(u.Month()), byte(u.Day()), byte(u.Hour()), byte(u.Minute()), byte(u.Second()), 0})
	if dir {
		r[25] = 2
	}
	both16(r[28:], 1)
	r[32] = byte(len(ident))
	copy(r[33:], ident)
	copy(r[n:], systemUse)
	return r
}

func primaryDescriptor(label string, totalSectors, rootSector uint32, at time.Time) []byte {
	d := make([]byte, sectorSize)
	d[0] = 1
	copy(d[1:6], "CD001")
	d[6] = 1
	pad := func(off, n int, s string) { copy(d[off:off+n], s+strings.Repeat(" ", n-len(s))) }
	pad(8, 32, "LINUX")
	pad(40, 32, label)
	both32(d[80:], totalSectors)
	both16(d[120:], 1)
	both16(d[124:], 1)
	both16(d[128:], sectorSize)
	both32(d[132:], 10) // one path table entry of 10 bytes: the root
	binary.LittleEndian.PutUint32(d[140:], 18)
	binary.BigEndian.PutUint32(d[148:], 19)
	copy(d[156:190], dirRecord([]byte{0}, rootSector, sectorSize, true, at, nil))
	pad(190, 128, "")
	pad(318, 128, "")
	pad(446, 128, "")
	pad(574, 128, "TERRAFORM-PROVIDER-EGRESS")
	pad(702, 37, "")
	pad(739, 37, "")
	pad(776, 37, "")
	stamp := at.UTC().Format("20060102150405") + "00"
	copy(d[813:830], stamp+"\x00")
	copy(d[830:847], stamp+"\x00")
	copy(d[847:864], "0000000000000000\x00")
	copy(d[864:881], stamp+"\x00")
	d[881] = 1
	return d
}

func pathTable(rootSector uint32, order binary.ByteOrder) []byte {
	t := make([]byte, 10)
	t[0] = 1 // identifier length: the root's identifier is one zero byte
	order.PutUint32(t[2:], rootSector)
	order.PutUint16(t[6:], 1)
	return t
}

// Rock Ridge (SUSP) entries. SP in the root's "." record announces them; PX gives POSIX modes; NM the name.
func suspSP() []byte { return []byte{'S', 'P', 7, 1, 0xBE, 0xEF, 0} }

func rrPX(mode uint32, links uint32) []byte {
	e := make([]byte, 44)
	copy(e, []byte{'P', 'X', 44, 1})
	both32(e[4:], mode)
	both32(e[12:], links)
	// uid, gid and serial number stay 0
	return e
}

func rrNM(name string) []byte {
	return append([]byte{'N', 'M', byte(5 + len(name)), 1, 0}, name...)
}
