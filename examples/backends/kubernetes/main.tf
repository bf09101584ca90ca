# A proxy on the cluster of your current kubeconfig context, for the pods of one namespace: the pods reach the
# hosts in allowed_destinations through it and nothing else (its NetworkPolicy backs Squid's rules up where the
# cluster's network plugin enforces policies). For GKE and EKS credentials (exec plugins), see the provider page.
terraform {
  required_providers {
    egress = {
      source  = "egress-proxies/egress"
      version = "~> 0.1"
    }
  }
}

variable "kubeconfig" {
  type    = string
  default = "~/.kube/config"
}

variable "namespace" {
  description = "An existing namespace; the proxy's objects go there."
  type        = string
  default     = "default"
}

variable "pod_cidr" {
  description = "The cluster's pod address range: the clients that may use the proxy."
  type        = string
  default     = "10.244.0.0/16"
}

provider "egress" {
  owner = "platform"

  kubernetes = {
    clusters = {
      main = { config_path = pathexpand(var.kubeconfig) }
    }
  }
}

resource "egress_proxy" "ci" {
  kubernetes = {
    cluster   = "main"
    namespace = var.namespace
    replicas  = 2
    resources = {
      requests = { cpu = "50m", memory = "64Mi" }
      limits   = { memory = "256Mi" }
    }
  }

  allowed_client_cidrs = [var.pod_cidr]
  allowed_destinations = [".github.com", ".githubusercontent.com"]
}

# Pods use the Service's DNS name: HTTPS_PROXY and HTTP_PROXY set to proxy_url, NO_PROXY to what they reach
# directly (".svc,.cluster.local" and the cluster's ranges). examples/workloads/kubernetes-deployment does that.
output "proxy_url" {
  value = egress_proxy.ci.proxy_url
}
