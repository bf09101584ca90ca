package libvirtconn

import (
	"io"

	libvirt "github.com/digitalocean/go-libvirt"
)

// API is every libvirt call the kvm backend makes, with go-libvirt's own signatures so that *libvirt.Libvirt
// implements it as is. Keeping it narrow makes the backend's in-memory fake small and lets tests count RPC
// calls.
type API interface {
	ConnectGetLibVersion() (uint64, error)
	ConnectGetVersion() (uint64, error)
	ConnectGetType() (string, error)
	ConnectGetCapabilities() (string, error)
	NodeGetInfo() (rModel [32]int8, rMemory uint64, rCpus int32, rMhz int32, rNodes int32, rSockets int32, rCores int32, rThreads int32, err error)

	DomainLookupByName(name string) (libvirt.Domain, error)
	DomainDefineXMLFlags(xml string, flags libvirt.DomainDefineFlags) (libvirt.Domain, error)
	DomainCreate(dom libvirt.Domain) error
	DomainGetState(dom libvirt.Domain, flags uint32) (int32, int32, error)
	DomainGetXMLDesc(dom libvirt.Domain, flags libvirt.DomainXMLFlags) (string, error)
	DomainGetMetadata(dom libvirt.Domain, typ int32, uri libvirt.OptString, flags libvirt.DomainModificationImpact) (string, error)
	DomainSetMetadata(dom libvirt.Domain, typ int32, metadata libvirt.OptString, key libvirt.OptString, uri libvirt.OptString, flags libvirt.DomainModificationImpact) error
	DomainDestroyFlags(dom libvirt.Domain, flags libvirt.DomainDestroyFlagsValues) error
	DomainUndefineFlags(dom libvirt.Domain, flags libvirt.DomainUndefineFlagsValues) error
	DomainInterfaceAddresses(dom libvirt.Domain, source uint32, flags uint32) ([]libvirt.DomainInterface, error)
	ConnectGetAllDomainStats(doms []libvirt.Domain, stats uint32, flags uint32) ([]libvirt.DomainStatsRecord, error)
	QEMUDomainAgentCommand(dom libvirt.Domain, cmd string, timeout int32, flags uint32) (libvirt.OptString, error)

	StoragePoolLookupByName(name string) (libvirt.StoragePool, error)
	StoragePoolGetInfo(pool libvirt.StoragePool) (uint8, uint64, uint64, uint64, error)
	StoragePoolListAllVolumes(pool libvirt.StoragePool, needResults int32, flags uint32) ([]libvirt.StorageVol, uint32, error)
	StorageVolLookupByName(pool libvirt.StoragePool, name string) (libvirt.StorageVol, error)
	StorageVolGetXMLDesc(vol libvirt.StorageVol, flags uint32) (string, error)
	StorageVolCreateXML(pool libvirt.StoragePool, xml string, flags libvirt.StorageVolCreateFlags) (libvirt.StorageVol, error)
	StorageVolUpload(vol libvirt.StorageVol, r io.Reader, offset uint64, length uint64, flags libvirt.StorageVolUploadFlags) error
	StorageVolDownload(vol libvirt.StorageVol, w io.Writer, offset uint64, length uint64, flags libvirt.StorageVolDownloadFlags) error
	StorageVolDelete(vol libvirt.StorageVol, flags libvirt.StorageVolDeleteFlags) error

	NetworkLookupByName(name string) (libvirt.Network, error)
	NetworkIsActive(net libvirt.Network) (int32, error)
	NetworkGetXMLDesc(net libvirt.Network, flags uint32) (string, error)
	NetworkGetDhcpLeases(net libvirt.Network, mac libvirt.OptString, needResults int32, flags uint32) ([]libvirt.NetworkDhcpLease, uint32, error)
	NetworkUpdateCompat(net libvirt.Network, command libvirt.NetworkUpdateCommand, section libvirt.NetworkUpdateSection, parentIndex int32, xml string, flags libvirt.NetworkUpdateFlags) error
}

var _ API = (*libvirt.Libvirt)(nil)
