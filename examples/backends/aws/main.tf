# A proxy on EC2 whose traffic leaves from an Elastic IP that partners allow-list once: it stays the same when the
# proxy is replaced. Credentials come from the AWS SDK's usual chain (AWS_PROFILE, the shared files, SSO, or the
# role Terraform runs with): nothing secret is written here.
terraform {
  required_providers {
    egress = {
      source  = "egress-proxies/egress"
      version = "~> 0.1"
    }
  }
}

variable "region" {
  type    = string
  default = "eu-west-1"
}

variable "subnet_id" {
  description = "A public subnet of the VPC the clients are in."
  type        = string
}

variable "instance_profile" {
  description = <<-EOT
    An instance profile whose role may read the proxy's parameters and report back:
    ssm:GetParameters on arn:aws:ssm:REGION:ACCOUNT:parameter/egress-proxy/*, ssm:PutParameter on
    arn:aws:ssm:REGION:ACCOUNT:parameter/egress-proxy/*/applied, and kms:Decrypt with the key alias/aws/ssm.
  EOT
  type        = string
}

variable "client_cidrs" {
  description = "The VPC ranges of the machines that use the proxy."
  type        = list(string)
  default     = ["10.0.0.0/16"]
}

provider "egress" {
  owner = "platform-prod"

  aws = {
    region = var.region
  }
}

resource "egress_proxy" "partner_api" {
  name = "partner-egress" # static_egress_ip finds the address again by this name when the proxy is replaced

  aws = {
    subnet_id            = var.subnet_id
    iam_instance_profile = var.instance_profile
    static_egress_ip     = true
    # Wait until the instance reports that Squid runs its configuration, so the apply ends with a proxy at work.
    wait_for_proxy = true
  }

  # The provider's own security group admits these ranges on the proxy port, and nothing else.
  allowed_client_cidrs = var.client_cidrs
  allowed_destinations = ["api.partner.example"]
}

output "egress_address" {
  description = "The address the partner sees: give it to their allow-list."
  value       = egress_proxy.partner_api.egress_address
}

output "proxy_url" {
  value = egress_proxy.partner_api.proxy_url
}
