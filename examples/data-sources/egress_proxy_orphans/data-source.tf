locals {
  proxies = {
    ci      = ["10.20.0.0/16"]
    staging = ["10.30.0.0/16"]
  }
}

resource "egress_proxy" "all" {
  for_each = local.proxies

  kvm                  = {}
  allowed_client_cidrs = each.value
  allowed_destinations = [".example.com"]
}

# Proxies labelled with this provider's owner that are older than 30 minutes
# and are not among the proxies this configuration manages.
data "egress_proxy_orphans" "this" {
  known_ids = [for p in egress_proxy.all : p.id]
  min_age   = "30m"
}

output "orphan_ids" {
  value = data.egress_proxy_orphans.this.orphans[*].id
}

# Scopes (hosts, zones, namespaces) that could not be listed: orphans there are missing above.
output "orphan_listing_errors" {
  value = data.egress_proxy_orphans.this.errors
}
