# Warn on every plan and apply when a configured backend target is unhealthy.
# A failed assertion in a check block is reported as a warning and does not stop the run.
check "egress_backends_healthy" {
  data "egress_backends" "all" {}

  assert {
    condition = data.egress_backends.all.healthy
    error_message = join("\n", [
      for b in data.egress_backends.all.backends :
      "${b.backend}/${b.target}: ${b.reason}" if !b.healthy
    ])
  }
}
