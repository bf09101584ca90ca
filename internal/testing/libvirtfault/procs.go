package libvirtfault

// remoteProcs names the procedures of libvirt's remote program that the kvm backend and go-libvirt's
// handshake use (numbers from libvirt's remote_protocol.x), so the test tables say which call was cut.
var remoteProcs = map[int32]string{
	1:   "ConnectOpen",
	2:   "ConnectClose",
	3:   "ConnectGetType",
	4:   "ConnectGetVersion",
	6:   "NodeGetInfo",
	7:   "ConnectGetCapabilities",
	9:   "DomainCreate",
	14:  "DomainGetXMLDesc",
	23:  "DomainLookupByName",
	43:  "NetworkGetXMLDesc",
	46:  "NetworkLookupByName",
	60:  "ConnectSupportsFeature",
	66:  "AuthList",
	84:  "StoragePoolLookupByName",
	87:  "StoragePoolGetInfo",
	93:  "StorageVolCreateXML",
	94:  "StorageVolDelete",
	95:  "StorageVolLookupByName",
	99:  "StorageVolGetXMLDesc",
	152: "NetworkIsActive",
	157: "ConnectGetLibVersion",
	208: "StorageVolUpload",
	209: "StorageVolDownload",
	212: "DomainGetState",
	231: "DomainUndefineFlags",
	234: "DomainDestroyFlags",
	264: "DomainSetMetadata",
	265: "DomainGetMetadata",
	282: "StoragePoolListAllVolumes",
	291: "NetworkUpdate",
	341: "NetworkGetDhcpLeases",
	344: "ConnectGetAllDomainStats",
	350: "DomainDefineXMLFlags",
	353: "DomainInterfaceAddresses",
}

// qemuProcs names the QEMU program's procedures the backend uses.
var qemuProcs = map[int32]string{
	3: "QEMUDomainAgentCommand",
}
