# A proxy on a remote libvirt host reached over SSH, for the other VMs on that host (CI runners, say) on its
# libvirt network "default". The base image is a volume already in the host's pool.
terraform {
  required_providers {
    egress = {
      source  = "egress-proxies/egress"
      version = "~> 0.1"
    }
  }
}

provider "egress" {
  owner = "platform-lab"

  kvm = {
    hosts = {
      hv1 = {
        uri = "qemu+ssh://ops@hv1.example.internal/system"
        # The key that logs in as ops, and the known_hosts file that holds hv1's host key: the connection
        # carries each proxy's seed ISO (its password hash and TLS key), so the host is always verified.
        ssh_key_file     = pathexpand("~/.ssh/id_ed25519")
        known_hosts_file = pathexpand("~/.ssh/known_hosts")
      }
    }
    pool        = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2" # uploaded once with virsh vol-upload
  }
}

resource "egress_proxy" "lab" {
  kvm = {
    host   = "hv1"
    network = "default"
    # The apply waits until hv1's DHCP server leases the proxy an address. The machine running Terraform cannot
    # reach that network, so the proxy itself is not probed: the apply says so in a warning.
  }

  allowed_client_cidrs = ["192.168.122.0/24"] # the VMs on hv1's network
  allowed_destinations = [".example.com"]
}

output "proxy_url" {
  value = egress_proxy.lab.proxy_url
}
