# A proxy on Kubernetes that serves Prometheus metrics to the monitoring namespace's Prometheus alone: mtail's
# egress_proxy_* at metrics_url, the Squid exporter's squid_* at squid_metrics_url. The proxy's clients do not
# reach those ports (its NetworkPolicy admits metrics.allowed_client_cidrs only). The PodMonitor and
# ServiceMonitor beside this file select such proxies; the alert rules and the dashboard read what they serve.
terraform {
  required_providers {
    egress = {
      source = "registry.terraform.io/egress-proxies/egress"
    }
  }
}

variable "prometheus_pod_cidr" {
  description = "The addresses your Prometheus scrapes from: its pods' range, or its node's for a host-network Prometheus."
  type        = string
  default     = "10.244.8.0/24"
}

resource "egress_proxy" "ci" {
  kubernetes = { cluster = "prod", namespace = "egress" }

  allowed_client_cidrs = ["10.244.0.0/16"]
  allowed_destinations = ["github.com", ".githubusercontent.com"]
  log_format           = "json" # what mtail counts

  metrics = {
    allowed_client_cidrs = [var.prometheus_pod_cidr]
    # port = 3903, squid_port = 9301: the defaults of mtail and the exporter
  }
}

output "metrics_url" {
  value = egress_proxy.ci.metrics_url
}

output "squid_metrics_url" {
  value = egress_proxy.ci.squid_metrics_url
}
