# orphans.tfquery.hcl, beside a configuration whose provider block configures the backends.
# A query file cannot read the state, so the ids of the proxies still wanted are written out.
list "egress_proxy" "orphans" {
  provider         = egress
  include_resource = true

  config {
    orphaned_only = true
    known_ids     = ["kvm/local/egress-0d6c1f5e9a2b4c71"]
    min_age       = "30m"
  }
}

# Every proxy of the owner on the kvm backend that carries team = "ci", orphaned or not.
list "egress_proxy" "ci" {
  provider = egress

  config {
    backends = ["kvm"]
    labels   = { team = "ci" }
  }
}
