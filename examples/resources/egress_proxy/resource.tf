# A proxy on a libvirt host that lets the build network reach the package mirrors
# of example.com and one exact API host, over HTTPS only. Its image is a Debian cloud
# image the provider downloads once into the host's pool and checks against its SHA-256.
variable "debian_image_sha256" {
  type        = string
  description = "SHA-256 of the image below: `curl -sL <url> | sha256sum`, once."
}

resource "egress_proxy" "example" {
  kvm = {
    host         = "local" # a key of the provider's kvm.hosts
    vcpus        = 1
    memory_mib   = 512
    image_url    = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
    image_sha256 = var.debian_image_sha256
  }

  allowed_client_cidrs = ["10.20.0.0/16"]
  allowed_destinations = [
    ".example.com",    # example.com and all of its subdomains
    "api.example.net", # this host only
  ]

  labels = {
    purpose = "ci-builds"
  }
}

# Workloads use the proxy through the usual environment variables.
output "https_proxy" {
  value = egress_proxy.example.proxy_url
}

# A proxy that requires basic authentication. The password is write-only: it is
# sent to the provider but never stored in the state. Change password_wo_version
# to roll out a new password to the running proxy.
variable "proxy_password" {
  type      = string
  sensitive = true
  ephemeral = true
}

# Its image is the provider's kvm.base_volume.
resource "egress_proxy" "authenticated" {
  kvm = {}

  allowed_client_cidrs = ["192.168.122.0/24"]
  allowed_destinations = [".debian.org"]
  allowed_ports        = [443, 80]

  auth = {
    username            = "builder"
    password_wo         = var.proxy_password
    password_wo_version = 1
  }

  timeouts {
    create = "30m"
  }
}

# A proxy on the provider's default Kubernetes cluster, in namespace "build": two pods behind a
# ClusterIP Service that pods of the cluster's pod range reach as <name>.build.svc:3128.
resource "egress_proxy" "in_cluster" {
  kubernetes = {
    namespace = "build"
    replicas  = 2
  }

  allowed_client_cidrs = ["10.244.0.0/16"]
  allowed_destinations = [".example.com"]
}
