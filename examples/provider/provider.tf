terraform {
  required_providers {
    egress = {
      source  = "egress-proxies/egress"
      version = "~> 0.1"
    }
  }
}

provider "egress" {
  # Every proxy this configuration creates is labelled with the owner;
  # egress_proxy_orphans lists the proxies of this owner that no configuration knows any more.
  owner = "platform-prod"

  # Added to the labels of every proxy.
  default_labels = {
    team        = "platform"
    environment = "prod"
  }

  # Only the backends configured here are ever contacted.
  kvm = {
    hosts = {
      local = {
        uri = "qemu:///system"
      }
    }
    # The image the proxies' root disks overlay, a volume in the host's default pool, for the proxies that set
    # neither their own base_volume nor image_url: a cloud image uploaded once, for example with
    #   virsh vol-create-as default debian-12-genericcloud-amd64.qcow2 2G --format qcow2
    #   virsh vol-upload --pool default debian-12-genericcloud-amd64.qcow2 ./debian-12-genericcloud-amd64.qcow2
    # A proxy can instead name an image the provider downloads itself (kvm.image_url and kvm.image_sha256).
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
}
