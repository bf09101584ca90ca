import {
  to = egress_proxy.example
  identity = {
    id = "kvm/local/egress-3f9a1c07d2b4e865"
  }
}
