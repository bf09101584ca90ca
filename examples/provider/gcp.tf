# Proxies on Compute Engine. Credentials come from the environment here (GOOGLE_CREDENTIALS,
# GOOGLE_APPLICATION_CREDENTIALS or Application Default Credentials), so nothing secret is written in the file.
provider "egress" {
  owner = "platform-prod"

  gcp = {
    project      = "my-project"
    default_zone = "europe-west1-b"
  }
}

# A proxy whose egress address is a reserved static address, named after the proxy ("build-egress-ip"):
# partners can allow-list it once, and it stays the same when the proxy is replaced.
resource "egress_proxy" "build" {
  name = "build-egress"

  gcp = {
    static_egress_ip = true
    machine_type     = "e2-small"
    network_tags     = ["egress-proxy"] # what the firewall rule below targets
  }

  allowed_client_cidrs = ["10.20.0.0/16"]
  allowed_destinations = [".example.com"]
}

output "egress_address" {
  value = egress_proxy.build.egress_address
}
