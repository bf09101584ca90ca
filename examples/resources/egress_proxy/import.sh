# The id is the one egress_proxy_orphans reports: kvm/<host>/<name>,
# gcp/<project>/<zone>/<name> or kubernetes/<cluster>/<namespace>/<name>.
terraform import egress_proxy.example kvm/local/egress-3f9a1c07d2b4e865
