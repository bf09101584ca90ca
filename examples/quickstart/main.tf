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

variable "libvirt_uri" {
  type    = string
  default = "qemu:///system"
}

provider "egress" {
  owner = "quickstart"
  kvm = {
    hosts       = { local = { uri = var.libvirt_uri } }
    pool        = "egress-test"
    network     = "egress-test"
    domain_type = "qemu" # kvm guests hang on some CI machines; use "auto" on your own
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
