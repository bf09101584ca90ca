# A workload that sends its outbound traffic through an egress proxy: the module makes the proxy, the Deployment
# gets the proxy's environment. The Deployment is applied with kubectl here, so the example needs no provider but
# egress; with the Kubernetes provider, the same map goes into kubernetes_deployment_v1's container `env` blocks:
#   dynamic "env" {
#     for_each = module.egress.environment
#     content {
#       name  = env.key
#       value = env.value
#     }
#   }
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
  type    = string
  default = "default"
}

provider "egress" {
  owner = "platform"

  kubernetes = {
    clusters = {
      main = { config_path = pathexpand(var.kubeconfig) }
    }
  }
}

module "egress" {
  source = "../../modules/egress-proxy-env"

  namespace    = var.namespace
  client_cidrs = ["10.244.0.0/16"]
  destinations = [".github.com"]
}

locals {
  deployment = {
    apiVersion = "apps/v1"
    kind       = "Deployment"
    metadata   = { name = "release-fetcher", namespace = var.namespace }
    spec = {
      replicas = 1
      selector = { matchLabels = { app = "release-fetcher" } }
      template = {
        metadata = { labels = { app = "release-fetcher" } }
        spec = {
          containers = [{
            name    = "fetch"
            image   = "docker.io/curlimages/curl:8.11.1"
            command = ["sh", "-c", "while true; do curl -fsS https://github.com/ -o /dev/null && echo ok; sleep 300; done"]
            env     = [for name, value in module.egress.environment : { name = name, value = value }]
          }]
        }
      }
    }
  }
}

# Applied when the proxy (hence its URL) changes, deleted on destroy.
resource "terraform_data" "deployment" {
  input = {
    manifest   = jsonencode(local.deployment)
    kubeconfig = pathexpand(var.kubeconfig)
  }

  provisioner "local-exec" {
    command     = "printf '%s' \"$MANIFEST\" | kubectl --kubeconfig \"$KUBECONFIG_PATH\" apply -f -"
    environment = { MANIFEST = self.input.manifest, KUBECONFIG_PATH = self.input.kubeconfig }
  }

  provisioner "local-exec" {
    when        = destroy
    command     = "printf '%s' \"$MANIFEST\" | kubectl --kubeconfig \"$KUBECONFIG_PATH\" delete --ignore-not-found -f -"
    environment = { MANIFEST = self.input.manifest, KUBECONFIG_PATH = self.input.kubeconfig }
  }
}
