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
  }
}
