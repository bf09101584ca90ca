package kvm

import (
	"io"
	"sort"
	"strconv"
	"sync"

	libvirt "github.com/digitalocean/go-libvirt"
)

// counter tallies calls per api method. Every api method is one libvirt RPC (NetworkUpdateCompat is two on
// the wire: it first asks the daemon which argument order it expects).
type counter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *counter) add(method string) {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
}

// take returns the total since the last take and the per-method counts, and starts again from zero.
func (c *counter) take() (int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	total, per := 0, c.calls
	for _, n := range per {
		total += n
	}
	c.calls = map[string]int{}
	return total, per
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.calls))
	for k := range c.calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		s += k + "=" + strconv.Itoa(c.calls[k]) + " "
	}
	return s
}

// countingAPI counts every call on its way to next.
type countingAPI struct {
	next api
	c    *counter
}

func (a *countingAPI) ConnectGetLibVersion() (uint64, error) {
	a.c.add("ConnectGetLibVersion")
	return a.next.ConnectGetLibVersion()
}

func (a *countingAPI) ConnectGetVersion() (uint64, error) {
	a.c.add("ConnectGetVersion")
	return a.next.ConnectGetVersion()
}

func (a *countingAPI) ConnectGetType() (string, error) {
	a.c.add("ConnectGetType")
	return a.next.ConnectGetType()
}

func (a *countingAPI) ConnectGetCapabilities() (string, error) {
	a.c.add("ConnectGetCapabilities")
	return a.next.ConnectGetCapabilities()
}

func (a *countingAPI) NodeGetInfo() (rModel [32]int8, rMemory uint64, rCpus int32, rMhz int32, rNodes int32, rSockets int32, rCores int32, rThreads int32, err error) {
	a.c.add("NodeGetInfo")
	return a.next.NodeGetInfo()
}

func (a *countingAPI) DomainLookupByName(name string) (libvirt.Domain, error) {
	a.c.add("DomainLookupByName")
	return a.next.DomainLookupByName(name)
}

func (a *countingAPI) DomainDefineXMLFlags(xml string, flags libvirt.DomainDefineFlags) (libvirt.Domain, error) {
	a.c.add("DomainDefineXMLFlags")
	return a.next.DomainDefineXMLFlags(xml, flags)
}

func (a *countingAPI) DomainCreate(dom libvirt.Domain) error {
	a.c.add("DomainCreate")
	return a.next.DomainCreate(dom)
}

func (a *countingAPI) DomainGetState(dom libvirt.Domain, flags uint32) (int32, int32, error) {
	a.c.add("DomainGetState")
	return a.next.DomainGetState(dom, flags)
}

func (a *countingAPI) DomainGetXMLDesc(dom libvirt.Domain, flags libvirt.DomainXMLFlags) (string, error) {
	a.c.add("DomainGetXMLDesc")
	return a.next.DomainGetXMLDesc(dom, flags)
}

func (a *countingAPI) DomainGetMetadata(dom libvirt.Domain, typ int32, uri libvirt.OptString, flags libvirt.DomainModificationImpact) (string, error) {
	a.c.add("DomainGetMetadata")
	return a.next.DomainGetMetadata(dom, typ, uri, flags)
}

func (a *countingAPI) DomainSetMetadata(dom libvirt.Domain, typ int32, metadata libvirt.OptString, key libvirt.OptString, uri libvirt.OptString, flags libvirt.DomainModificationImpact) error {
	a.c.add("DomainSetMetadata")
	return a.next.DomainSetMetadata(dom, typ, metadata, key, uri, flags)
}

func (a *countingAPI) DomainDestroyFlags(dom libvirt.Domain, flags libvirt.DomainDestroyFlagsValues) error {
	a.c.add("DomainDestroyFlags")
	return a.next.DomainDestroyFlags(dom, flags)
}

func (a *countingAPI) DomainUndefineFlags(dom libvirt.Domain, flags libvirt.DomainUndefineFlagsValues) error {
	a.c.add("DomainUndefineFlags")
	return a.next.DomainUndefineFlags(dom, flags)
}

func (a *countingAPI) DomainInterfaceAddresses(dom libvirt.Domain, source uint32, flags uint32) ([]libvirt.DomainInterface, error) {
	a.c.add("DomainInterfaceAddresses")
	return a.next.DomainInterfaceAddresses(dom, source, flags)
}

func (a *countingAPI) ConnectGetAllDomainStats(doms []libvirt.Domain, stats uint32, flags uint32) ([]libvirt.DomainStatsRecord, error) {
	a.c.add("ConnectGetAllDomainStats")
	return a.next.ConnectGetAllDomainStats(doms, stats, flags)
}

func (a *countingAPI) QEMUDomainAgentCommand(dom libvirt.Domain, cmd string, timeout int32, flags uint32) (libvirt.OptString, error) {
	a.c.add("QEMUDomainAgentCommand")
	return a.next.QEMUDomainAgentCommand(dom, cmd, timeout, flags)
}

func (a *countingAPI) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	a.c.add("StoragePoolLookupByName")
	return a.next.StoragePoolLookupByName(name)
}

func (a *countingAPI) StoragePoolGetInfo(pool libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	a.c.add("StoragePoolGetInfo")
	return a.next.StoragePoolGetInfo(pool)
}

func (a *countingAPI) StoragePoolListAllVolumes(pool libvirt.StoragePool, needResults int32, flags uint32) ([]libvirt.StorageVol, uint32, error) {
	a.c.add("StoragePoolListAllVolumes")
	return a.next.StoragePoolListAllVolumes(pool, needResults, flags)
}

func (a *countingAPI) StorageVolLookupByName(pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	a.c.add("StorageVolLookupByName")
	return a.next.StorageVolLookupByName(pool, name)
}

func (a *countingAPI) StorageVolGetXMLDesc(vol libvirt.StorageVol, flags uint32) (string, error) {
	a.c.add("StorageVolGetXMLDesc")
	return a.next.StorageVolGetXMLDesc(vol, flags)
}

func (a *countingAPI) StorageVolCreateXML(pool libvirt.StoragePool, xml string, flags libvirt.StorageVolCreateFlags) (libvirt.StorageVol, error) {
	a.c.add("StorageVolCreateXML")
	return a.next.StorageVolCreateXML(pool, xml, flags)
}

func (a *countingAPI) StorageVolUpload(vol libvirt.StorageVol, r io.Reader, offset uint64, length uint64, flags libvirt.StorageVolUploadFlags) error {
	a.c.add("StorageVolUpload")
	return a.next.StorageVolUpload(vol, r, offset, length, flags)
}

func (a *countingAPI) StorageVolDownload(vol libvirt.StorageVol, w io.Writer, offset uint64, length uint64, flags libvirt.StorageVolDownloadFlags) error {
	a.c.add("StorageVolDownload")
	return a.next.StorageVolDownload(vol, w, offset, length, flags)
}

func (a *countingAPI) StorageVolDelete(vol libvirt.StorageVol, flags libvirt.StorageVolDeleteFlags) error {
	a.c.add("StorageVolDelete")
	return a.next.StorageVolDelete(vol, flags)
}

func (a *countingAPI) NetworkLookupByName(name string) (libvirt.Network, error) {
	a.c.add("NetworkLookupByName")
	return a.next.NetworkLookupByName(name)
}

func (a *countingAPI) NetworkIsActive(net libvirt.Network) (int32, error) {
	a.c.add("NetworkIsActive")
	return a.next.NetworkIsActive(net)
}

func (a *countingAPI) NetworkGetXMLDesc(net libvirt.Network, flags uint32) (string, error) {
	a.c.add("NetworkGetXMLDesc")
	return a.next.NetworkGetXMLDesc(net, flags)
}

func (a *countingAPI) NetworkGetDhcpLeases(net libvirt.Network, mac libvirt.OptString, needResults int32, flags uint32) ([]libvirt.NetworkDhcpLease, uint32, error) {
	a.c.add("NetworkGetDhcpLeases")
	return a.next.NetworkGetDhcpLeases(net, mac, needResults, flags)
}

func (a *countingAPI) NetworkUpdateCompat(net libvirt.Network, command libvirt.NetworkUpdateCommand, section libvirt.NetworkUpdateSection, parentIndex int32, xml string, flags libvirt.NetworkUpdateFlags) error {
	a.c.add("NetworkUpdateCompat")
	return a.next.NetworkUpdateCompat(net, command, section, parentIndex, xml, flags)
}
