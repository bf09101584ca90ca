package kvm

import "github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"

// api is every libvirt call the backend makes, through one of a host's connections (libvirtconn.API). The
// in-memory fake implements it.
type api = libvirtconn.API
