resource "egress_proxy" "all" {
  for_each = toset(["ci", "staging"])

  kvm                  = {}
  allowed_client_cidrs = ["10.20.0.0/16"]
  allowed_destinations = [".example.com"]
  labels               = { team = each.key }
}

# Invoked with: terraform apply -invoke=action.egress_proxy_gc.sweep
action "egress_proxy_gc" "sweep" {
  config {
    known_ids     = [for p in egress_proxy.all : p.id]
    min_age       = "1h"
    max_deletions = 5
    dry_run       = false
  }
}
