# A module a platform team hands to application teams: one egress proxy in the team's namespace, and the
# environment its workloads need to use it. Callers configure the egress provider (the cluster named "main" here
# is one of the provider's kubernetes.clusters).
terraform {
  required_providers {
    egress = {
      source  = "egress-proxies/egress"
      version = "~> 0.1"
    }
  }
}

variable "namespace" {
  description = "The namespace of the proxy and of the workloads that use it."
  type        = string
}

variable "cluster" {
  description = "A key of the provider's kubernetes.clusters."
  type        = string
  default     = "main"
}

variable "client_cidrs" {
  description = "Who may use the proxy: the cluster's pod range, or narrower."
  type        = list(string)
}

variable "destinations" {
  description = "Host names the workloads may reach: `api.example.com`, or `.example.com` for a domain."
  type        = list(string)
}

variable "no_proxy" {
  description = "What the workloads reach directly, past the proxy: in-cluster names and ranges."
  type        = list(string)
  default     = [".svc", ".cluster.local", "10.0.0.0/8"]
}

resource "egress_proxy" "this" {
  kubernetes = {
    cluster   = var.cluster
    namespace = var.namespace
    replicas  = 2
  }

  allowed_client_cidrs = var.client_cidrs
  allowed_destinations = var.destinations
  labels               = { team = replace(var.namespace, "/[^a-z0-9_-]/", "-") }
}

output "proxy_url" {
  value = egress_proxy.this.proxy_url
}

# Both spellings: curl and Go read the upper-case names, some tools only the lower-case ones.
output "environment" {
  description = "Environment variables that send a workload's HTTP and HTTPS traffic through the proxy."
  value = {
    HTTPS_PROXY = egress_proxy.this.proxy_url
    HTTP_PROXY  = egress_proxy.this.proxy_url
    NO_PROXY    = join(",", var.no_proxy)
    https_proxy = egress_proxy.this.proxy_url
    http_proxy  = egress_proxy.this.proxy_url
    no_proxy    = join(",", var.no_proxy)
  }
}
