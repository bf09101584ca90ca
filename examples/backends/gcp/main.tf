# A proxy on Compute Engine with a reserved egress address that partners allow-list once: it stays the same when
# the proxy is replaced. Credentials are Application Default Credentials (`gcloud auth application-default login`,
# or the metadata server when Terraform runs on Google Cloud): nothing secret is written here.
terraform {
  required_providers {
    egress = {
      source  = "egress-proxies/egress"
      version = "~> 0.1"
    }
  }
}

variable "project" {
  type = string
}

variable "zone" {
  type    = string
  default = "europe-west1-b"
}

variable "client_cidrs" {
  description = "The VPC ranges of the machines that use the proxy."
  type        = list(string)
  default     = ["10.132.0.0/20"]
}

variable "proxy_service_account" {
  description = "The proxy VM's own service account, holding no role: the provider grants it the proxy's secret alone."
  type        = string
}

provider "egress" {
  owner = "platform-prod"

  gcp = {
    project      = var.project
    default_zone = var.zone
  }
}

resource "egress_proxy" "partner_api" {
  name = "partner-egress" # static_egress_ip names the address after the proxy: "partner-egress-ip"

  gcp = {
    static_egress_ip = true
    network_tags     = ["egress-proxy"]
    # With a service account, the proxy's password hash and TLS key (when it has auth or tls) live in a Secret
    # Manager secret that only this account may read, not in the instance's metadata.
    service_account = var.proxy_service_account
    # Wait until the VM reports that Squid runs its configuration, so the apply ends with a proxy at work.
    wait_for_proxy = true
  }

  allowed_client_cidrs = var.client_cidrs
  allowed_destinations = ["api.partner.example"]
}

# Compute Engine drops traffic to the proxy port until a firewall rule lets the clients in. With the gcloud CLI:
#   gcloud compute firewall-rules create egress-proxy-clients --network default --direction INGRESS \
#     --allow tcp:3128 --source-ranges 10.132.0.0/20 --target-tags egress-proxy
# or the google provider's google_compute_firewall (docs/index.md shows it).
output "egress_address" {
  description = "The address the partner sees: give it to their allow-list."
  value       = egress_proxy.partner_api.egress_address
}

output "proxy_url" {
  value = egress_proxy.partner_api.proxy_url
}
