# The quickstart: one egress proxy on the local libvirt environment that `make quickstart` starts.
# scripts/quickstart.sh passes the variables; see README.md for the same proxy on your own machine.
terraform {
  required_providers {
    egress = {
      source = "registry.terraform.io/egress-proxies/egress"
    }
  }
}

variable "image_file" {
  description = "Proxy image built by `make image`."
  type        = string
}

# The quickstart's private libvirtd (scripts/libvirt-env.sh, instance "quickstart"), on a socket of its own:
# the machine's own libvirt is left alone. On your own libvirt, "qemu:///system".
variable "libvirt_uri" {
  type    = string
  default = "qemu:///system?socket=/var/lib/egress-quickstart/run/libvirt-sock"
}

# QEMU's software emulation by default: on the machines the quickstart was tried on, /dev/kvm exists but guests
# hang under it. "kvm" where hardware virtualisation works (make quickstart QUICKSTART_DOMAIN_TYPE=kvm).
variable "domain_type" {
  type    = string
  default = "qemu"
}

provider "egress" {
  owner = "quickstart"
  kvm = {
    hosts       = { local = { uri = var.libvirt_uri } }
    pool        = "egress-test"
    network     = "egress-test"
    domain_type = var.domain_type
  }
}

resource "egress_proxy" "quickstart" {
  kvm = {
    image_file = var.image_file
    memory_mib = 512
  }

  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = ["allowed.test"]
  labels               = { purpose = "quickstart" }
}

output "proxy_url" {
  value = egress_proxy.quickstart.proxy_url
}
