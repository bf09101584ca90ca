package libvirtconn

import (
	"io"

	libvirt "github.com/digitalocean/go-libvirt"
)

// Trace returns an API that tells call of every call on its way to next, by the API method's name: the
// backend's tests count calls with it.
func Trace(next API, call func(method string)) API { return &tracedAPI{next: next, call: call} }

// tracedAPI tells call of every call on its way to next, by the API method's name: Pool.Do notes which call
// a dropped connection interrupted, and watches volume streams with it.
type tracedAPI struct {
	next API
	call func(method string)
	// stream, when set, watches a volume upload or download: progress is called for every chunk that moves,
	// done when the call returns.
	stream func(method string) (progress, done func())
}

type progressReader struct {
	io.Reader
	progress func()
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.Reader.Read(b)
	if n > 0 {
		r.progress()
	}
	return n, err
}

type progressWriter struct {
	io.Writer
	progress func()
}

func (w progressWriter) Write(b []byte) (int, error) {
	n, err := w.Writer.Write(b)
	if n > 0 {
		w.progress()
	}
	return n, err
}

func (a *tracedAPI) ConnectGetLibVersion() (uint64, error) {
	a.call("ConnectGetLibVersion")
	return a.next.ConnectGetLibVersion()
}

func (a *tracedAPI) ConnectGetVersion() (uint64, error) {
	a.call("ConnectGetVersion")
	return a.next.ConnectGetVersion()
}

func (a *tracedAPI) ConnectGetType() (string, error) {
	a.call("ConnectGetType")
	return a.next.ConnectGetType()
}

func (a *tracedAPI) ConnectGetCapabilities() (string, error) {
	a.call("ConnectGetCapabilities")
	return a.next.ConnectGetCapabilities()
}

func (a *tracedAPI) NodeGetInfo() (rModel [32]int8, rMemory uint64, rCpus int32, rMhz int32, rNodes int32, rSockets int32, rCores int32, rThreads int32, err error) {
	a.call("NodeGetInfo")
	return a.next.NodeGetInfo()
}

func (a *tracedAPI) DomainLookupByName(name string) (libvirt.Domain, error) {
	a.call("DomainLookupByName")
	return a.next.DomainLookupByName(name)
}

func (a *tracedAPI) DomainDefineXMLFlags(xml string, flags libvirt.DomainDefineFlags) (libvirt.Domain, error) {
	a.call("DomainDefineXMLFlags")
	return a.next.DomainDefineXMLFlags(xml, flags)
}

func (a *tracedAPI) DomainCreate(dom libvirt.Domain) error {
	a.call("DomainCreate")
	return a.next.DomainCreate(dom)
}

func (a *tracedAPI) DomainGetState(dom libvirt.Domain, flags uint32) (int32, int32, error) {
	a.call("DomainGetState")
	return a.next.DomainGetState(dom, flags)
}

func (a *tracedAPI) DomainGetXMLDesc(dom libvirt.Domain, flags libvirt.DomainXMLFlags) (string, error) {
	a.call("DomainGetXMLDesc")
	return a.next.DomainGetXMLDesc(dom, flags)
}

func (a *tracedAPI) DomainGetMetadata(dom libvirt.Domain, typ int32, uri libvirt.OptString, flags libvirt.DomainModificationImpact) (string, error) {
	a.call("DomainGetMetadata")
	return a.next.DomainGetMetadata(dom, typ, uri, flags)
}

func (a *tracedAPI) DomainSetMetadata(dom libvirt.Domain, typ int32, metadata libvirt.OptString, key libvirt.OptString, uri libvirt.OptString, flags libvirt.DomainModificationImpact) error {
	a.call("DomainSetMetadata")
	return a.next.DomainSetMetadata(dom, typ, metadata, key, uri, flags)
}

func (a *tracedAPI) DomainDestroyFlags(dom libvirt.Domain, flags libvirt.DomainDestroyFlagsValues) error {
	a.call("DomainDestroyFlags")
	return a.next.DomainDestroyFlags(dom, flags)
}

func (a *tracedAPI) DomainUndefineFlags(dom libvirt.Domain, flags libvirt.DomainUndefineFlagsValues) error {
	a.call("DomainUndefineFlags")
	return a.next.DomainUndefineFlags(dom, flags)
}

func (a *tracedAPI) DomainInterfaceAddresses(dom libvirt.Domain, source uint32, flags uint32) ([]libvirt.DomainInterface, error) {
	a.call("DomainInterfaceAddresses")
	return a.next.DomainInterfaceAddresses(dom, source, flags)
}

func (a *tracedAPI) ConnectGetAllDomainStats(doms []libvirt.Domain, stats uint32, flags uint32) ([]libvirt.DomainStatsRecord, error) {
	a.call("ConnectGetAllDomainStats")
	return a.next.ConnectGetAllDomainStats(doms, stats, flags)
}

func (a *tracedAPI) QEMUDomainAgentCommand(dom libvirt.Domain, cmd string, timeout int32, flags uint32) (libvirt.OptString, error) {
	a.call("QEMUDomainAgentCommand")
	return a.next.QEMUDomainAgentCommand(dom, cmd, timeout, flags)
}

func (a *tracedAPI) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	a.call("StoragePoolLookupByName")
	return a.next.StoragePoolLookupByName(name)
}

func (a *tracedAPI) StoragePoolGetInfo(pool libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	a.call("StoragePoolGetInfo")
	return a.next.StoragePoolGetInfo(pool)
}

func (a *tracedAPI) StoragePoolListAllVolumes(pool libvirt.StoragePool, needResults int32, flags uint32) ([]libvirt.StorageVol, uint32, error) {
	a.call("StoragePoolListAllVolumes")
	return a.next.StoragePoolListAllVolumes(pool, needResults, flags)
}

func (a *tracedAPI) StorageVolLookupByName(pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	a.call("StorageVolLookupByName")
	return a.next.StorageVolLookupByName(pool, name)
}

func (a *tracedAPI) StorageVolGetXMLDesc(vol libvirt.StorageVol, flags uint32) (string, error) {
	a.call("StorageVolGetXMLDesc")
	return a.next.StorageVolGetXMLDesc(vol, flags)
}

func (a *tracedAPI) StorageVolCreateXML(pool libvirt.StoragePool, xml string, flags libvirt.StorageVolCreateFlags) (libvirt.StorageVol, error) {
	a.call("StorageVolCreateXML")
	return a.next.StorageVolCreateXML(pool, xml, flags)
}

func (a *tracedAPI) StorageVolUpload(vol libvirt.StorageVol, r io.Reader, offset uint64, length uint64, flags libvirt.StorageVolUploadFlags) error {
	a.call("StorageVolUpload")
	if a.stream != nil {
		progress, done := a.stream("StorageVolUpload")
		defer done()
		r = progressReader{Reader: r, progress: progress}
	}
	return a.next.StorageVolUpload(vol, r, offset, length, flags)
}

func (a *tracedAPI) StorageVolDownload(vol libvirt.StorageVol, w io.Writer, offset uint64, length uint64, flags libvirt.StorageVolDownloadFlags) error {
	a.call("StorageVolDownload")
	if a.stream != nil {
		progress, done := a.stream("StorageVolDownload")
		defer done()
		w = progressWriter{Writer: w, progress: progress}
	}
	return a.next.StorageVolDownload(vol, w, offset, length, flags)
}

func (a *tracedAPI) StorageVolDelete(vol libvirt.StorageVol, flags libvirt.StorageVolDeleteFlags) error {
	a.call("StorageVolDelete")
	return a.next.StorageVolDelete(vol, flags)
}

func (a *tracedAPI) NetworkLookupByName(name string) (libvirt.Network, error) {
	a.call("NetworkLookupByName")
	return a.next.NetworkLookupByName(name)
}

func (a *tracedAPI) NetworkIsActive(net libvirt.Network) (int32, error) {
	a.call("NetworkIsActive")
	return a.next.NetworkIsActive(net)
}

func (a *tracedAPI) NetworkGetXMLDesc(net libvirt.Network, flags uint32) (string, error) {
	a.call("NetworkGetXMLDesc")
	return a.next.NetworkGetXMLDesc(net, flags)
}

func (a *tracedAPI) NetworkGetDhcpLeases(net libvirt.Network, mac libvirt.OptString, needResults int32, flags uint32) ([]libvirt.NetworkDhcpLease, uint32, error) {
	a.call("NetworkGetDhcpLeases")
	return a.next.NetworkGetDhcpLeases(net, mac, needResults, flags)
}

func (a *tracedAPI) NetworkUpdateCompat(net libvirt.Network, command libvirt.NetworkUpdateCommand, section libvirt.NetworkUpdateSection, parentIndex int32, xml string, flags libvirt.NetworkUpdateFlags) error {
	a.call("NetworkUpdateCompat")
	return a.next.NetworkUpdateCompat(net, command, section, parentIndex, xml, flags)
}
