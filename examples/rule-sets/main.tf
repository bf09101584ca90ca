# One shared proxy, several workloads, each with its own allow-list: the CI runners by address, the deploy job
# by user, the billing service by client certificate. The team's new allow-list runs in report mode first: its
# requests still go through, and those it would refuse are logged as decision=would_deny (see the guide
# "Rolling out an allow-list"). Nothing anyone allows reaches the hosts in denied_destinations.
terraform {
  required_providers {
    egress = {
      source = "registry.terraform.io/egress-proxies/egress"
    }
  }
}

variable "proxy_certificate_pem" {
  description = "The proxy's TLS certificate, then any intermediates (PEM)."
  type        = string
}

variable "proxy_private_key_pem" {
  description = "The certificate's private key (PEM). Write-only: never stored in the state."
  type        = string
  sensitive   = true
  ephemeral   = true
}

variable "client_ca_pem" {
  description = "The CA that signs the workloads' client certificates (PEM)."
  type        = string
}

variable "deployer_password" {
  type      = string
  sensitive = true
  ephemeral = true
}

variable "auditor_password" {
  type      = string
  sensitive = true
  ephemeral = true
}

provider "egress" {
  owner = "platform"
  kubernetes = {
    clusters = { main = { config_path = pathexpand("~/.kube/config") } }
  }
}

resource "egress_proxy" "shared" {
  kubernetes = {
    cluster   = "main"
    namespace = "egress"
  }

  # Who may use the proxy at all, and where those no rule set names may go.
  allowed_client_cidrs = ["10.20.0.0/16", "10.30.0.0/16"]
  allowed_destinations = [".debian.org"]

  # Refused for everyone, in enforce and report mode alike.
  denied_destinations = ["pastebin.com", ".file-sharing.example"]

  tls = {
    certificate_pem            = var.proxy_certificate_pem
    private_key_pem_wo         = var.proxy_private_key_pem
    private_key_pem_wo_version = 1
    client_ca_pem              = var.client_ca_pem # clients present a certificate this CA signed
  }

  auth = {
    users = [
      { username = "deployer", password_wo = var.deployer_password, password_wo_version = 1 },
      { username = "auditor", password_wo = var.auditor_password, password_wo_version = 1 },
    ]
  }

  # The first rule set whose clients match a request decides it.
  rule_sets = [
    {
      name    = "deploy"
      clients = { users = ["deployer"] }
      destinations = [
        ".amazonaws.com",
        "registry.example.com",
      ]
    },
    {
      name         = "billing"
      clients      = { certificate_subjects = ["billing"] }
      destinations = ["api.payments.example"]
    },
    {
      name         = "ci"
      clients      = { source_cidrs = ["10.20.0.0/16"] }
      destinations = [".github.com", ".githubusercontent.com", ".golang.org"]
      ports        = [443, 22]
    },
    {
      # New: logs what it would refuse, refuses nothing yet. Set mode = "enforce" once the log is clean.
      name         = "data-team"
      clients      = { source_cidrs = ["10.30.0.0/16"] }
      destinations = [".pypi.org", "files.pythonhosted.org"]
      mode         = "report"
    },
  ]
}

output "https_proxy" {
  value = egress_proxy.shared.proxy_url
}
