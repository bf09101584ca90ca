# A proxy on this machine's libvirt, from a Debian cloud image the provider downloads itself: nothing to build.
# The VM gets its address on libvirt's usual NAT network, "default" (192.168.122.0/24), and lets the machines on
# that network reach the hosts in allowed_destinations over HTTPS.
terraform {
  required_providers {
    egress = {
      source  = "egress-proxies/egress"
      version = "~> 0.1"
    }
  }
}

variable "image_url" {
  description = "A cloud image that boots with cloud-init's NoCloud datasource, qcow2 or raw."
  type        = string
  default     = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
}

variable "image_sha256" {
  description = "SHA-256 of the image at image_url (Debian publishes SHA-512 sums: `curl -sL <image_url> | sha256sum` once, then pin it)."
  type        = string
}

provider "egress" {
  owner = "workstation"

  kvm = {
    # The local system daemon. Its default pool and network hold the proxy's volumes and interface.
    hosts = {
      local = { uri = "qemu:///system" }
    }
  }
}

resource "egress_proxy" "builds" {
  kvm = {
    # Downloaded once into the pool as egress-image-<sha256 prefix>, checked against image_sha256, and shared by
    # every proxy made from the same image. The user-data installs Squid, since a cloud image has none.
    image_url    = var.image_url
    image_sha256 = var.image_sha256
  }

  allowed_client_cidrs = ["192.168.122.0/24"]
  allowed_destinations = [".debian.org", "github.com", ".githubusercontent.com"]
}

# A machine on the network uses it with
#   export HTTPS_PROXY=<proxy_url> HTTP_PROXY=<proxy_url> NO_PROXY=localhost,127.0.0.1,192.168.122.0/24
output "proxy_url" {
  value = egress_proxy.builds.proxy_url
}
