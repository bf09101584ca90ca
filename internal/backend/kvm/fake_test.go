package kvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
	"libvirt.org/go/libvirtxml"
)

// fakeHost is an in-memory libvirt host behind the api interface: enough of domains, pools, volumes and
// networks for the backend's logic, with libvirt's error codes. failOn makes a method fail, to test error paths.
type fakeHost struct {
	mu       sync.Mutex
	memKiB   uint64
	domType  string // "kvm" advertises kvm in the capabilities
	domains  map[string]*fakeDomain
	pools    map[string]*fakePool
	networks map[string]*fakeNetwork
	failOn   map[string]error
	nextID   int32
	// uploadDelay is the pause between an upload's chunks.
	uploadDelay time.Duration
	// noPasst refuses the passt backend as Debian 12's libvirt 9.0 does.
	noPasst bool
	// onCall, when set before use, is told of some calls as they happen (see notify): tests end a wait at a
	// known step by cancelling their ctx there, instead of guessing how long the steps before it take.
	onCall func(method string)
	// startsLostBefore and startsLostAfter make the next DomainCreate calls fail as a dropped connection
	// does: before the call reached the host, or after it took effect with its answer lost.
	startsLostBefore, startsLostAfter int
	// startsKilledByDaemon make the next started domains die with libvirtd: the start is answered, then the
	// connection drops and the domain reads shut off (reason daemon). startsStopAtOnce make them stop at once
	// with no connection lost, as a QEMU that cannot run does.
	startsKilledByDaemon, startsStopAtOnce int
	killedByDaemon                         map[string]bool
	// startsKilledQuietly are like startsKilledByDaemon with the lost connection unseen: it fell between
	// two calls, and the next call was made on a new one.
	startsKilledQuietly int
	// rootsGoneAtDefine make the next domain definitions find their root volume gone, as when a delete of
	// an attempt cut short reaches the daemon after the next attempt made the volume again.
	rootsGoneAtDefine int
	// rootsGoneAtStart do the same to the next starts, after the domain was defined.
	rootsGoneAtStart int
	// streamHolds make the next deletes of a volume just downloaded fail as libvirt's do while the download
	// stream's hold on the volume has not ended yet ("still in use").
	streamHolds int
	downloaded  map[string]bool
	// startsWedged leave the next started domains paused (starting up) for good, their answer lost: libvirtd
	// 9.0 died in the middle of the start. Each state read of such a domain is notified as "WedgedState".
	startsWedged int
	// agents are the guests' QEMU guest agents, by domain name (fakeagent_test.go).
	agents map[string]*fakeAgent
	// rootsDeleted lists, in order, the domains whose root volume was deleted while the domain was defined:
	// an image roll's new disks. Each such guest boots afresh from its seed (its agent starts over).
	rootsDeleted []string
	// rootCreatesUntilCut, when above 0, counts down the root volume creates; the one that brings it to 0
	// fails as a call the connection dropped before libvirtd saw it.
	rootCreatesUntilCut int
	// keepalivedStartsLate is how many times a guest's keepalived answers inactive after the guest's agent
	// first answers (a new boot), as it starts only once Squid answers. addressOrphaned lists the guests
	// whose keepalived was stopped while no other guest's ran: the virtual address had nowhere to go.
	keepalivedStartsLate int
	addressOrphaned      []string
	// guestIfaces are the interfaces the guest agent reports, by domain name: how a guest on a host bridge,
	// where libvirt has no DHCP leases, makes its address known. Without an entry, no agent answers.
	guestIfaces map[string][]libvirt.DomainInterface
}

type fakeDomain struct {
	dom           libvirt.Domain
	xml, meta     string
	state, reason int32
}

type fakePool struct {
	pool   libvirt.StoragePool
	active bool
	avail  uint64
	vols   map[string]*fakeVol
}

type fakeVol struct {
	vol  libvirt.StorageVol
	xml  string
	data []byte
	// created volumes report their path, and their physical size from data, as a dir pool does.
	created bool
}

type fakeNetwork struct {
	net    libvirt.Network
	active bool
	// forward is the network's <forward> element, nil for an isolated network. newFakeHost's "net" is NAT, as
	// libvirt's default network is.
	forward *libvirtxml.NetworkForward
	hosts   []libvirtxml.NetworkDHCPHost
	leases  []libvirt.NetworkDhcpLease
}

func newFakeHost() *fakeHost {
	f := &fakeHost{
		memKiB: 8 << 20, domType: "qemu",
		domains: map[string]*fakeDomain{}, pools: map[string]*fakePool{}, networks: map[string]*fakeNetwork{},
		failOn: map[string]error{}, agents: map[string]*fakeAgent{},
	}
	f.pools["pool"] = &fakePool{pool: libvirt.StoragePool{Name: "pool"}, active: true, avail: 100 * gib, vols: map[string]*fakeVol{}}
	f.pools["pool"].vols["base.qcow2"] = &fakeVol{
		vol: libvirt.StorageVol{Pool: "pool", Name: "base.qcow2", Key: "/pool/base.qcow2"},
		xml: `<volume><name>base.qcow2</name><capacity unit="bytes">1073741824</capacity><target><path>/pool/base.qcow2</path><format type="qcow2"/></target></volume>`,
	}
	f.networks["net"] = &fakeNetwork{net: libvirt.Network{Name: "net"}, active: true, forward: &libvirtxml.NetworkForward{Mode: "nat"}}
	return f
}

func lvErr(code libvirt.ErrorNumber, format string, args ...any) error {
	return libvirt.Error{Code: uint32(code), Message: fmt.Sprintf(format, args...)}
}

// notify tells onCall that method runs. Called without f.mu held, so onCall may cancel and return at once.
func (f *fakeHost) notify(method string) {
	if f.onCall != nil {
		f.onCall(method)
	}
}

// hook returns the injected failure for method, if any.
func (f *fakeHost) hook(method string) error { return f.failOn[method] }

func (f *fakeHost) ConnectGetLibVersion() (uint64, error) { return 9000000, nil }
func (f *fakeHost) ConnectGetVersion() (uint64, error)    { return 7002000, nil }
func (f *fakeHost) ConnectGetType() (string, error)       { return "QEMU", nil }
func (f *fakeHost) ConnectGetCapabilities() (string, error) {
	return fmt.Sprintf(`<capabilities><host><uuid>x</uuid></host><guest><os_type>hvm</os_type><arch name="x86_64"><domain type="qemu"/><domain type="%s"/></arch></guest></capabilities>`, f.domType), nil
}

func (f *fakeHost) NodeGetInfo() ([32]int8, uint64, int32, int32, int32, int32, int32, int32, error) {
	return [32]int8{}, f.memKiB, 2, 2000, 1, 1, 2, 1, f.hook("NodeGetInfo")
}

func (f *fakeHost) DomainLookupByName(name string) (libvirt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.domains[name]
	if !ok {
		return libvirt.Domain{}, lvErr(libvirt.ErrNoDomain, "Domain not found: no domain with matching name '%s'", name)
	}
	return d.dom, nil
}

func (f *fakeHost) domain(dom libvirt.Domain) (*fakeDomain, error) {
	d, ok := f.domains[dom.Name]
	if !ok {
		return nil, lvErr(libvirt.ErrNoDomain, "Domain not found: no domain with matching name '%s'", dom.Name)
	}
	return d, nil
}

func (f *fakeHost) DomainDefineXMLFlags(x string, _ libvirt.DomainDefineFlags) (libvirt.Domain, error) {
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(x); err != nil {
		return libvirt.Domain{}, lvErr(libvirt.ErrXMLError, "%v", err)
	}
	if f.noPasst && strings.Contains(x, `<backend type="passt">`) {
		return libvirt.Domain{}, lvErr(libvirt.ErrXMLError, "XML error: Invalid value for attribute 'type' in element 'backend': 'passt'.")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rootsGoneAtDefine > 0 {
		f.rootsGoneAtDefine--
		root := dx.Name + "-root.qcow2"
		delete(f.pools["pool"].vols, root)
		return libvirt.Domain{}, lvErr(libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name '%s'", root)
	}
	d := &fakeDomain{dom: libvirt.Domain{Name: dx.Name, ID: -1}, xml: x, state: int32(libvirt.DomainShutoff)}
	if dx.Metadata != nil {
		d.meta = strings.TrimSpace(dx.Metadata.XML)
	}
	f.domains[dx.Name] = d
	return d.dom, nil
}

func (f *fakeHost) DomainCreate(dom libvirt.Domain) error {
	if err := f.hook("DomainCreate"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startsLostBefore > 0 {
		f.startsLostBefore--
		return io.EOF // the connection dropped before libvirtd saw the call
	}
	d, err := f.domain(dom)
	if err != nil {
		return err
	}
	if f.rootsGoneAtStart > 0 {
		f.rootsGoneAtStart--
		root := dom.Name + "-root.qcow2"
		delete(f.pools["pool"].vols, root)
		return lvErr(libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name '%s'", root)
	}
	if d.state == int32(libvirt.DomainRunning) {
		return lvErr(libvirt.ErrOperationInvalid, "Requested operation is not valid: domain is already running")
	}
	f.nextID++
	if f.startsWedged > 0 {
		f.startsWedged--
		d.state, d.reason, d.dom.ID = int32(libvirt.DomainPaused), int32(libvirt.DomainPausedStartingUp), f.nextID
		return io.EOF
	}
	d.state, d.reason, d.dom.ID = int32(libvirt.DomainRunning), int32(libvirt.DomainRunningBooted), f.nextID
	switch {
	case f.startsKilledByDaemon > 0:
		f.startsKilledByDaemon--
		if f.killedByDaemon == nil {
			f.killedByDaemon = map[string]bool{}
		}
		f.killedByDaemon[dom.Name] = true
	case f.startsKilledQuietly > 0:
		f.startsKilledQuietly--
		d.state, d.reason = int32(libvirt.DomainShutoff), int32(libvirt.DomainShutoffDaemon)
	case f.startsStopAtOnce > 0:
		f.startsStopAtOnce--
		d.state, d.reason = int32(libvirt.DomainShutoff), int32(libvirt.DomainShutoffShutdown)
	}
	if f.startsLostAfter > 0 {
		f.startsLostAfter--
		return io.EOF // the domain started, and the connection dropped before its answer came back
	}
	return nil
}

func (f *fakeHost) DomainGetState(dom libvirt.Domain, _ uint32) (int32, int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.domain(dom)
	if err != nil {
		return 0, 0, err
	}
	if f.killedByDaemon[dom.Name] {
		delete(f.killedByDaemon, dom.Name)
		d.state, d.reason = int32(libvirt.DomainShutoff), int32(libvirt.DomainShutoffDaemon)
		return 0, 0, io.EOF // libvirtd died: the connection with it
	}
	if d.state == int32(libvirt.DomainPaused) && d.reason == int32(libvirt.DomainPausedStartingUp) {
		defer f.notify("WedgedState") // after the lock is released: the hook may cancel the caller
	}
	return d.state, d.reason, nil
}

func (f *fakeHost) DomainGetXMLDesc(dom libvirt.Domain, _ libvirt.DomainXMLFlags) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.domain(dom)
	if err != nil {
		return "", err
	}
	return d.xml, nil
}

func (f *fakeHost) DomainGetMetadata(dom libvirt.Domain, _ int32, _ libvirt.OptString, _ libvirt.DomainModificationImpact) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.domain(dom)
	if err != nil {
		return "", err
	}
	if d.meta == "" {
		return "", lvErr(libvirt.ErrNoDomainMetadata, "metadata not found: Requested metadata element is not present")
	}
	return d.meta, nil
}

func (f *fakeHost) DomainSetMetadata(dom libvirt.Domain, _ int32, meta libvirt.OptString, _ libvirt.OptString, _ libvirt.OptString, _ libvirt.DomainModificationImpact) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.domain(dom)
	if err != nil {
		return err
	}
	d.meta = meta[0]
	return nil
}

func (f *fakeHost) DomainDestroyFlags(dom libvirt.Domain, _ libvirt.DomainDestroyFlagsValues) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.domain(dom)
	if err != nil {
		return err
	}
	if d.state != int32(libvirt.DomainRunning) {
		return lvErr(libvirt.ErrOperationInvalid, "Requested operation is not valid: domain is not running")
	}
	d.state, d.reason = int32(libvirt.DomainShutoff), int32(libvirt.DomainShutoffDestroyed)
	return nil
}

func (f *fakeHost) DomainUndefineFlags(dom libvirt.Domain, _ libvirt.DomainUndefineFlagsValues) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.domain(dom); err != nil {
		return err
	}
	delete(f.domains, dom.Name)
	return nil
}

func (f *fakeHost) DomainInterfaceAddresses(dom libvirt.Domain, _ uint32, _ uint32) ([]libvirt.DomainInterface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ifaces, ok := f.guestIfaces[dom.Name]; ok {
		return ifaces, nil
	}
	return nil, lvErr(libvirt.ErrAgentUnresponsive, "Guest agent is not responding: QEMU guest agent is not connected")
}

func (f *fakeHost) ConnectGetAllDomainStats(_ []libvirt.Domain, _ uint32, _ uint32) ([]libvirt.DomainStatsRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []libvirt.DomainStatsRecord
	for _, d := range f.domains {
		out = append(out, libvirt.DomainStatsRecord{Dom: d.dom, Params: []libvirt.TypedParam{
			{Field: libvirt.DomainStatsStateState, Value: *libvirt.NewTypedParamValueInt(d.state)},
			{Field: libvirt.DomainStatsStateReason, Value: *libvirt.NewTypedParamValueInt(d.reason)},
		}})
	}
	return out, nil
}

func (f *fakeHost) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pools[name]
	if !ok {
		return libvirt.StoragePool{}, lvErr(libvirt.ErrNoStoragePool, "Storage pool not found: no storage pool with matching name '%s'", name)
	}
	return p.pool, nil
}

func (f *fakeHost) StoragePoolGetInfo(pool libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pools[pool.Name]
	state := uint8(libvirt.StoragePoolRunning)
	if !p.active {
		state = 0
	}
	return state, 200 * gib, 100*gib - p.avail, p.avail, nil
}

func (f *fakeHost) StoragePoolListAllVolumes(pool libvirt.StoragePool, _ int32, _ uint32) ([]libvirt.StorageVol, uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []libvirt.StorageVol
	for _, v := range f.pools[pool.Name].vols {
		out = append(out, v.vol)
	}
	return out, uint32(len(out)), nil
}

func (f *fakeHost) StorageVolLookupByName(pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.pools[pool.Name].vols[name]
	if !ok {
		return libvirt.StorageVol{}, lvErr(libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name '%s'", name)
	}
	return v.vol, nil
}

func (f *fakeHost) vol(v libvirt.StorageVol) (*fakeVol, error) {
	fv, ok := f.pools[v.Pool].vols[v.Name]
	if !ok {
		return nil, lvErr(libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name '%s'", v.Name)
	}
	return fv, nil
}

func (f *fakeHost) StorageVolGetXMLDesc(v libvirt.StorageVol, _ uint32) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fv, err := f.vol(v)
	if err != nil {
		return "", err
	}
	if !fv.created {
		return fv.xml, nil
	}
	var vx libvirtxml.StorageVolume
	if err := vx.Unmarshal(fv.xml); err != nil {
		return "", err
	}
	if vx.Target == nil {
		vx.Target = &libvirtxml.StorageVolumeTarget{}
	}
	vx.Target.Path = fv.vol.Key
	vx.Physical = &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(len(fv.data))}
	if vx.Target.Format == nil || vx.Target.Format.Type == "raw" {
		vx.Capacity = &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: max(vx.Capacity.Value, uint64(len(fv.data)))}
	}
	return vx.Marshal()
}

func (f *fakeHost) StorageVolCreateXML(pool libvirt.StoragePool, x string, _ libvirt.StorageVolCreateFlags) (libvirt.StorageVol, error) {
	var vx libvirtxml.StorageVolume
	if err := vx.Unmarshal(x); err != nil {
		return libvirt.StorageVol{}, lvErr(libvirt.ErrXMLError, "%v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.HasSuffix(vx.Name, "-root.qcow2") && f.rootCreatesUntilCut > 0 {
		if f.rootCreatesUntilCut--; f.rootCreatesUntilCut == 0 {
			return libvirt.StorageVol{}, io.EOF
		}
	}
	p := f.pools[pool.Name]
	if _, ok := p.vols[vx.Name]; ok {
		return libvirt.StorageVol{}, lvErr(libvirt.ErrStorageVolExist, "storage volume '%s' exists already", vx.Name)
	}
	v := &fakeVol{vol: libvirt.StorageVol{Pool: pool.Name, Name: vx.Name, Key: "/" + pool.Name + "/" + vx.Name}, xml: x, created: true}
	p.vols[vx.Name] = v
	return v.vol, nil
}

// StorageVolUpload writes the stream in chunks, as libvirtd does, so a volume's size grows while it runs
// (uploadDelay spaces the chunks); an injected failure reads the stream and stores nothing.
func (f *fakeHost) StorageVolUpload(v libvirt.StorageVol, r io.Reader, _ uint64, _ uint64, _ libvirt.StorageVolUploadFlags) error {
	if err := f.hook("StorageVolUpload"); err != nil {
		_, _ = io.Copy(io.Discard, r) // drained as libvirtd would; the injected failure is the result
		return err
	}
	f.mu.Lock()
	fv, err := f.vol(v)
	if err == nil {
		fv.data = nil
	}
	delay := f.uploadDelay
	f.mu.Unlock()
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		f.mu.Lock()
		fv.data = append(fv.data, buf[:n]...)
		f.mu.Unlock()
		f.notify("StorageVolUpload")
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return lvErr(libvirt.ErrRPC, "stream aborted: %v", err)
		}
		time.Sleep(delay)
	}
}

func (f *fakeHost) StorageVolDownload(v libvirt.StorageVol, w io.Writer, _ uint64, length uint64, _ libvirt.StorageVolDownloadFlags) error {
	f.mu.Lock()
	fv, err := f.vol(v)
	var data []byte
	if err == nil {
		// Read under the lock: an upload to the same volume may be appending to it side by side.
		data = fv.data
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if uint64(len(data)) > length {
		data = data[:length]
	}
	_, err = io.Copy(w, bytes.NewReader(data))
	f.mu.Lock()
	if f.downloaded == nil {
		f.downloaded = map[string]bool{}
	}
	f.downloaded[v.Pool+"/"+v.Name] = true
	f.mu.Unlock()
	return err
}

func (f *fakeHost) StorageVolDelete(v libvirt.StorageVol, _ libvirt.StorageVolDeleteFlags) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.vol(v); err != nil {
		return err
	}
	if f.downloaded[v.Pool+"/"+v.Name] && f.streamHolds > 0 {
		f.streamHolds--
		return lvErr(libvirt.ErrOperationInvalid, "Requested operation is not valid: volume '%s' is still in use.", v.Name)
	}
	delete(f.pools[v.Pool].vols, v.Name)
	if name, ok := strings.CutSuffix(v.Name, "-root.qcow2"); ok && f.domains[name] != nil {
		f.rootsDeleted = append(f.rootsDeleted, name)
		delete(f.agents, name)
	}
	return nil
}

func (f *fakeHost) NetworkLookupByName(name string) (libvirt.Network, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.networks[name]
	if !ok {
		return libvirt.Network{}, lvErr(libvirt.ErrNoNetwork, "Network not found: no network with matching name '%s'", name)
	}
	return n.net, nil
}

func (f *fakeHost) NetworkIsActive(n libvirt.Network) (int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.networks[n.Name].active {
		return 1, nil
	}
	return 0, nil
}

func (f *fakeHost) NetworkGetXMLDesc(n libvirt.Network, _ uint32) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hook("NetworkGetXMLDesc"); err != nil {
		return "", err
	}
	nx := libvirtxml.Network{Name: n.Name, Forward: f.networks[n.Name].forward, IPs: []libvirtxml.NetworkIP{{
		Address: "198.18.0.1", Netmask: "255.255.255.0",
		DHCP: &libvirtxml.NetworkDHCP{Hosts: f.networks[n.Name].hosts},
	}}}
	return nx.Marshal()
}

func (f *fakeHost) NetworkGetDhcpLeases(n libvirt.Network, mac libvirt.OptString, _ int32, _ uint32) ([]libvirt.NetworkDhcpLease, uint32, error) {
	f.notify("NetworkGetDhcpLeases")
	f.mu.Lock()
	defer f.mu.Unlock()
	leases := slices.Clone(f.networks[n.Name].leases)
	// A running guest whose MAC has a reservation on the network takes its reserved address, as from dnsmasq.
	for _, h := range f.networks[n.Name].hosts {
		for _, d := range f.domains {
			if d.state == int32(libvirt.DomainRunning) && strings.Contains(strings.ToLower(d.xml), strings.ToLower(h.MAC)) {
				leases = append(leases, libvirt.NetworkDhcpLease{Type: int32(libvirt.IPAddrTypeIpv4), Mac: libvirt.OptString{h.MAC}, Ipaddr: h.IP, Expirytime: 1})
			}
		}
	}
	var out []libvirt.NetworkDhcpLease
	for _, le := range leases {
		if len(mac) == 0 || (len(le.Mac) > 0 && strings.EqualFold(le.Mac[0], mac[0])) {
			out = append(out, le)
		}
	}
	return out, uint32(len(out)), nil
}

func (f *fakeHost) NetworkUpdateCompat(n libvirt.Network, cmd libvirt.NetworkUpdateCommand, _ libvirt.NetworkUpdateSection, _ int32, x string, _ libvirt.NetworkUpdateFlags) error {
	var h libvirtxml.NetworkDHCPHost
	if err := h.Unmarshal(x); err != nil {
		return lvErr(libvirt.ErrXMLError, "%v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fn := f.networks[n.Name]
	switch cmd {
	case libvirt.NetworkUpdateCommandAddLast:
		for _, e := range fn.hosts {
			if strings.EqualFold(e.MAC, h.MAC) || e.IP == h.IP {
				return lvErr(libvirt.ErrOperationInvalid, "Requested operation is not valid: there is an existing dhcp host entry in network '%s' that matches \"<host mac='%s' ip='%s'/>\"", n.Name, h.MAC, h.IP)
			}
		}
		fn.hosts = append(fn.hosts, h)
	case libvirt.NetworkUpdateCommandDelete:
		kept := fn.hosts[:0]
		for _, e := range fn.hosts {
			if !strings.EqualFold(e.MAC, h.MAC) || e.IP != h.IP {
				kept = append(kept, e)
			}
		}
		fn.hosts = kept
	}
	return nil
}

// fakeSession connects a backend to f through the counting wrapper, which is how tests count RPC calls.
func fakeBackend(f *fakeHost) (*Backend, *counter) {
	cnt := &counter{calls: map[string]int{}}
	dial := func(context.Context, HostConfig, target) (*libvirtconn.Session, error) {
		return &libvirtconn.Session{API: countingAPI(f, cnt), Lost: make(chan struct{}), Close: func() {}}, nil
	}
	b, err := newBackend(Config{Hosts: map[string]HostConfig{"h": {
		URI: "test:///fake", Pool: "pool", Network: "net", BaseVolume: "base.qcow2", DomainType: DomainTypeQEMU,
	}}}, dial)
	if err != nil {
		panic(err)
	}
	b.pollInterval = time.Millisecond
	return b, cnt
}
