# Proxies on Kubernetes clusters. Each cluster has a name of its own, which proxies choose with
# kubernetes.cluster and which becomes part of their ids.
terraform {
  required_providers {
    egress = {
      source  = "egress-proxies/egress"
      version = "~> 0.1"
    }
  }
}

variable "gke_endpoint" {
  type        = string
  description = "The GKE cluster's API server address, such as google_container_cluster.main.endpoint."
}

variable "gke_ca_certificate" {
  type        = string
  description = "The GKE cluster's CA certificate in PEM (base64decode of master_auth[0].cluster_ca_certificate)."
}

variable "eks_endpoint" {
  type        = string
  description = "The EKS cluster's API server URL, such as aws_eks_cluster.main.endpoint."
}

variable "eks_ca_certificate" {
  type        = string
  description = "The EKS cluster's CA certificate in PEM (base64decode of certificate_authority[0].data)."
}

provider "egress" {
  owner = "platform-prod"

  kubernetes = {
    clusters = {
      # A context of a kubeconfig file, with whatever credentials the context names.
      onprem = {
        config_path    = "~/.kube/config"
        config_context = "onprem-admin"
      }

      # GKE: a token from gke-gcloud-auth-plugin (installed with the gcloud CLI), which uses your
      # gcloud or Application Default Credentials.
      gke = {
        host                   = "https://${var.gke_endpoint}"
        cluster_ca_certificate = var.gke_ca_certificate
        exec = {
          api_version = "client.authentication.k8s.io/v1beta1"
          command     = "gke-gcloud-auth-plugin"
        }
      }

      # EKS: a token from the AWS CLI, for the credentials of the AWS profile named in env.
      eks = {
        host                   = var.eks_endpoint
        cluster_ca_certificate = var.eks_ca_certificate
        exec = {
          api_version = "client.authentication.k8s.io/v1beta1"
          command     = "aws"
          args        = ["eks", "get-token", "--cluster-name", "main", "--output", "json"]
          env = {
            AWS_PROFILE = "platform"
          }
        }
      }
    }
  }
}

# A proxy for the CI runners in namespace "ci" of the GKE cluster; the runners use it through its
# Service's DNS name, which proxy_url carries.
resource "egress_proxy" "ci" {
  kubernetes = {
    cluster   = "gke"
    namespace = "ci"
    replicas  = 2
  }

  allowed_client_cidrs = ["10.8.0.0/14"] # the cluster's pod range
  allowed_destinations = [".example.com"]
}

# For a Deployment's container: env { name = "HTTPS_PROXY", value = egress_proxy.ci.proxy_url }, with
# NO_PROXY listing what must not go through it (".svc,.cluster.local,10.0.0.0/8").
output "https_proxy" {
  value = egress_proxy.ci.proxy_url
}
